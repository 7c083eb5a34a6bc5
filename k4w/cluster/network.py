"""`invoke network-up`: the cluster switch, its host gateway address and its NetNat, on Hyper-V.

docs/hyperv-host.md "First cluster on Hyper-V". The work is host/network-up.ps1 (idempotent, validated like
every other .ps1); this module derives its parameters from the config and runs it through
powershell.exe, the invocation on standard input with every value escaped by the `ps` filter's
function, so no value is ever interpolated into PowerShell code.
"""

from __future__ import annotations

import os
import platform

from k4w.render import packer_http
from k4w.infra import proc, ui
from k4w.infra import sources
from ..render import escape
from k4w.model.config import Config
from k4w.infra.errors import K4wError
from k4w.derive.values import derive_network

POWERSHELL = ["powershell.exe", "-NoProfile", "-ExecutionPolicy", "Bypass", "-Command", "-"]
SCRIPT = "network-up.ps1"
NOT_ELEVATED = 2  # host/network-up.ps1's and host/cluster-nic.ps1's exit code when the session lacks the rights
CLUSTER_NIC_SCRIPT = "cluster-nic.ps1"
CLUSTER_NIC_NAME = "k4w-cluster"   # the Hyper-V adapter's name: how host/cluster-nic.ps1 finds it again


def nat_name(cfg: Config) -> str:
    return f"{cfg.cluster.name}-nat"


def network_up_parameters(cfg: Config) -> dict[str, str]:
    """host/network-up.ps1's parameters from the config."""
    net = derive_network(cfg)
    return {
        "SwitchName": cfg.hyperv.cluster_switch,
        "Gateway": net.gateway,
        "PrefixLength": str(net.node_prefixlen),
        "NatName": nat_name(cfg),
        "NatPrefix": net.node_cidr,
        "PackerRuleName": packer_http.RULE_NAME,
        "PackerPorts": packer_http.port_range(),
        "PackerInterfaceAlias": packer_http.interface_alias(cfg.hyperv.management_switch),
        "SwitchType": cfg.hyperv.cluster_switch_type,
        "NetAdapterName": cfg.hyperv.cluster_adapter or "",
    }


def network_up_command(cfg: Config) -> str:
    """The PowerShell line that runs host/network-up.ps1 with the config's values."""
    script = sources.REPO.host / SCRIPT
    arguments = " ".join(f"-{name} {escape.ps(value)}" for name, value in network_up_parameters(cfg).items())
    # `exit $LASTEXITCODE`: -Command turns a script's own exit code into 0 or 1 otherwise
    # (about_PowerShell_exe, -Command), and cluster-up must tell "not elevated" (2) apart.
    return f"& {escape.ps(script)} {arguments}; exit $LASTEXITCODE"


def cluster_nic_parameters(cfg: Config, vmname: str, mac: str, windows: bool) -> dict[str, str]:
    """host/cluster-nic.ps1's parameters for one VM. MAC spoofing: l2bridge (Flannel host-gw on
    Windows) sends pod traffic with the pods' own MAC addresses through the node's NIC, which Hyper-V
    drops unless spoofing is on; Linux nodes route pod traffic with their own MAC, so they keep the
    safer default."""
    return {
        "VMName": vmname,
        "SwitchName": cfg.hyperv.cluster_switch,
        "AdapterName": CLUSTER_NIC_NAME,
        "MacAddress": mac,
        "MacSpoofing": "On" if windows else "Off",
    }


def cluster_nic_command(cfg: Config, vmname: str, mac: str, windows: bool) -> str:
    """The PowerShell line that runs host/cluster-nic.ps1 for one VM (see network_up_command)."""
    script = sources.REPO.host / CLUSTER_NIC_SCRIPT
    arguments = " ".join(f"-{name} {escape.ps(value)}" for name, value in cluster_nic_parameters(cfg, vmname, mac, windows).items())
    return f"& {escape.ps(script)} {arguments}; exit $LASTEXITCODE"


def switch_check_script(cfg: Config) -> str:
    """PowerShell that exits 0 when the cluster switch exists (cluster-up's first step)."""
    return (
        "$ErrorActionPreference = 'Stop'\n"
        f"if ($null -eq (Get-VMSwitch -Name {escape.ps(cfg.hyperv.cluster_switch)} -ErrorAction SilentlyContinue)) {{ exit 3 }}\n"
        "exit 0\n"
    )


# The program that reaches the Hyper-V host's PowerShell in place of powershell.exe: the tests name a
# recorded fake here (tests/fakes/vagrant.py), as they put a fake `vagrant` first on PATH.
HOST_POWERSHELL_ENV = "K4W_HOST_POWERSHELL"


def run_powershell(script: str) -> tuple[int, str]:
    """Run PowerShell on this (Windows) host through powershell.exe, the code on stdin."""
    other = os.environ.get(HOST_POWERSHELL_ENV)
    if platform.system() != "Windows" and not other:
        raise K4wError(
            f"this is {platform.system()}, not a Windows Hyper-V host: network-up (a Hyper-V switch and a NetNat) "
            "and each VM's cluster NIC are made there only. Use --dry-run to see the PowerShell it would run."
        )
    result = proc.run([other, *POWERSHELL[1:]] if other else POWERSHELL, input=script, timeout=300)
    return result.returncode, result.output.strip()


def show_powershell(code: str) -> tuple[int, str]:
    """run_powershell in a dry run: the exact command and what it would read on stdin."""
    proc.show(POWERSHELL)
    ui.say("# its standard input:\n" + code.strip())
    return 0, ""


def network_up(cfg: Config, dry_run: bool = False, runner=run_powershell) -> str:
    """Create (or confirm) the cluster switch, gateway address and NetNat. Returns the command run."""
    command = network_up_command(cfg)
    if dry_run:
        show_powershell(command)
        script = sources.REPO.host / SCRIPT
        ui.say(f"# {script}:\n{script.read_text(encoding='utf-8')}")
        return command
    code, output = runner(command)
    for line in output.splitlines():
        ui.say(line)
    if code == NOT_ELEVATED:
        raise K4wError("network-up needs Administrator rights: run the terminal with 'Run as administrator'")
    if code != 0:
        raise K4wError(f"network-up failed (exit {code}); see the message above")
    return command
