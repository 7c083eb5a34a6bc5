"""Packer's HTTP server on the Hyper-V host, which serves preseed.cfg to the Ubuntu installer,
and the Windows Firewall rule that lets build VMs reach it.

Packer picks a free port between http_port_min and http_port_max (default 8000-9000). A
firewall rule needs a known port, so the range is pinned small: ten ports leave room for a
port in use and for parallel builds. The rule admits traffic on one interface only: the host's
vNIC on the management switch the build VMs use (hyperv.management_switch, "Default Switch" by
default), named by its alias. Not LocalSubnet, which admits every subnet the host is on, the
office LAN included, where the served files would be anyone's. An alias, not an address range,
because the Default Switch's subnet changes at every host boot. host/packer-http-rule.ps1 creates
it (from network-up) and checks it (from doctor).
"""

from __future__ import annotations

PORT_MIN, PORT_MAX = 8780, 8789  # chosen by k4w: inside Packer's default 8000-9000, above common dev ports
RULE_NAME = "k4w-packer-http"
SCRIPT = "packer-http-rule.ps1"
# host/packer-http-rule.ps1 -Check exit codes
MISSING, BLOCKED = 3, 4


def port_range() -> str:
    return f"{PORT_MIN}-{PORT_MAX}"


def interface_alias(management_switch: str) -> str:
    """The host's vNIC on a Hyper-V switch: Hyper-V names it "vEthernet (<switch name>)", as
    Get-NetAdapter shows for the Default Switch ("vEthernet (Default Switch)")."""
    return f"vEthernet ({management_switch})"


def rule_parameters(management_switch: str) -> dict[str, str]:
    """host/packer-http-rule.ps1's parameters for a config's management switch."""
    return {"RuleName": RULE_NAME, "Ports": port_range(), "InterfaceAlias": interface_alias(management_switch)}


def uses_http_server(cluster) -> bool:
    """Whether some box's build fetches from Packer's HTTP server (the Ubuntu installer does;
    Windows reads its answer file from the build CD)."""
    return any(not prof.is_windows and prof.data.build.get("builder", "hyperv-iso") == "hyperv-iso"
               for prof in cluster.profiles.values())


def check_command(script_path, management_switch: str) -> str:
    """PowerShell that runs the rule check; exit 0 ready, MISSING or BLOCKED otherwise."""
    from k4w.render import escape  # render imports this module for the template's ports

    arguments = " ".join(f"-{name} {escape.ps(value)}" for name, value in rule_parameters(management_switch).items())
    return f"& {escape.ps(str(script_path))} {arguments} -Check; exit $LASTEXITCODE"


def doctor_fix(code: int) -> str:
    if code == BLOCKED:
        return ("an enabled inbound Block rule names packer.exe (left by a 'Cancel' on the firewall prompt) and "
                "block rules win over allow rules: remove it in 'Windows Defender Firewall with Advanced Security', "
                "then run: invoke network-up")
    return "run as Administrator: invoke network-up (it creates the rule)"
