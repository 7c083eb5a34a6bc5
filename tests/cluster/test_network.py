"""`invoke network-up`: host/network-up.ps1 parses, checks rights first and is idempotent, and the
command that runs it carries the config's values as escaped parameters."""

from __future__ import annotations

import platform
import re

import pytest
import yaml

from k4w.model import config as config_mod
from k4w.infra import sources
from k4w.cluster import network
from k4w.infra.errors import K4wError
from k4w.validate import powershell_rules as powershell
from tests.helpers import config_dict

SCRIPT = sources.REPO.host / "network-up.ps1"


def cfg_with(**overrides):
    return config_mod.parse(yaml.safe_dump(config_dict(**overrides)), "test.yml")


def script() -> str:
    return SCRIPT.read_text(encoding="utf-8")


def test_script_parses_and_lints():
    from k4w.validate import powershell_rules as powershell

    assert powershell.parse_text_errors(script()) == []
    assert powershell.lint_errors(SCRIPT) == []


def test_every_parameter_the_command_passes_is_a_mandatory_parameter_of_the_script():
    declared = set(re.findall(r"\[Parameter\(Mandatory = \$true\)\](?:\[\w+\(.*?\)\])?\[\w+\]\$(\w+)", script()))
    assert declared == set(network.network_up_parameters(cfg_with()))


def test_command_runs_the_script_with_the_config_values():
    command = network.network_up_command(cfg_with())
    assert powershell.parse_text_errors(command) == []
    assert command.startswith(f"& '{SCRIPT}' ")
    assert ("-SwitchName 'k4w-cluster' -Gateway '192.168.250.1' -PrefixLength '24' -NatName 'k4w-nat' "
            "-NatPrefix '192.168.250.0/24'") in command
    # The script's own exit code (2: not elevated) must reach us through -Command.
    assert command.endswith("; exit $LASTEXITCODE")


def test_admin_rights_are_checked_before_anything_changes():
    text = script()
    admin = text.index("IsInRole([Security.Principal.WindowsBuiltInRole]::Administrator)")
    first_change = min(text.index(cmd) for cmd in ("New-VMSwitch", "New-NetIPAddress", "New-NetNat"))
    assert admin < first_change
    assert f"exit {network.NOT_ELEVATED}" in text[admin:first_change]


@pytest.mark.parametrize("lookup, create", [
    ("$switch = Get-VMSwitch -Name $SwitchName", "        New-VMSwitch -Name $SwitchName -NetAdapterName $NetAdapterName -AllowManagementOS $true"),
    ("$switch = Get-VMSwitch -Name $SwitchName", "    } else {\n        New-VMSwitch -Name $SwitchName -SwitchType Internal"),
    ("Where-Object { $_.IPAddress -eq $Gateway }", "if ($existing.Count -eq 0) {\n        New-NetIPAddress"),
    ("$nats = @(Get-NetNat", "New-NetNat -Name $NatName -InternalIPInterfaceAddressPrefix $NatPrefix"),
])
def test_every_object_is_created_only_when_absent(lookup, create):
    text = script()
    assert text.index(lookup) < text.index(create)


def test_overlapping_netnat_is_detected_by_name():
    text = script()
    assert "$wanted.First -le $other.Last -and $other.First -le $wanted.Last" in text
    assert "overlaps ${NatPrefix}" in text
    # the overlap scan runs before New-NetNat and only when our NAT does not exist yet
    assert text.index("foreach ($nat in $nats)") < text.index("New-NetNat -Name")


def test_an_external_switch_gets_no_host_address_and_no_netnat():
    """hyperv.cluster_switch_type External: the switch is bound to the adapter, and everything that
    makes this host the nodes' gateway (its address, the NetNat) is in the Internal branch only."""
    text = script()
    external = text.index("if ($SwitchType -eq 'External') {\n    # The user's network routes")
    internal = text.index("} else {", external)
    end = text.index("\n}\n", internal)
    for change in ("New-NetIPAddress", "New-NetNat", "Get-NetNat"):
        assert internal < text.index(change) < end, change
    command = network.network_up_command(cfg_with(**{"hyperv.cluster_switch_type": "External", "hyperv.cluster_adapter": "Ethernet 2",
                                                      "hyperv.cluster_gateway": "192.168.250.254"}))
    assert "-Gateway '192.168.250.254'" in command and "-SwitchType 'External' -NetAdapterName 'Ethernet 2'" in command
    assert powershell.parse_text_errors(command) == []
    assert "-SwitchType 'Internal' -NetAdapterName ''" in network.network_up_command(cfg_with())


@pytest.mark.parametrize("hyperv, message", [
    ({"hyperv.cluster_switch_type": "External"}, "cluster_switch_type External needs cluster_adapter"),
    ({"hyperv.cluster_adapter": "Ethernet"}, "cluster_adapter and cluster_gateway are for cluster_switch_type External"),
    ({"hyperv.cluster_switch_type": "External", "hyperv.cluster_adapter": "Ethernet", "hyperv.cluster_gateway": "10.9.9.1"},
     "hyperv.cluster_gateway: 10.9.9.1 is outside network.node_cidr 192.168.250.0/24"),
    ({"hyperv.cluster_switch_type": "External", "hyperv.cluster_adapter": "Ethernet", "hyperv.cluster_gateway": "192.168.250.10"},
     "nodes[0].ip: 192.168.250.10 is reserved for the host gateway on the cluster switch"),
])
def test_external_switch_settings_are_checked(hyperv, message):
    from k4w.infra.errors import ConfigError

    with pytest.raises(ConfigError) as refused:
        cfg_with(**hyperv)
    assert message in str(refused.value)


def test_values_are_escaped_for_powershell():
    command = network.network_up_command(cfg_with(**{"hyperv.cluster_switch": "it's $(evil)"}))
    assert "-SwitchName 'it''s $(evil)'" in command
    assert powershell.parse_text_errors(command) == []


def test_other_cluster_names_and_cidrs_flow_through():
    cfg = cfg_with(**{"cluster.name": "lab", "network.node_cidr": "172.30.8.0/22",
                      "nodes.0.ip": "172.30.8.10", "nodes.1.ip": "172.30.8.11", "nodes.2.ip": "172.30.8.21"})
    command = network.network_up_command(cfg)
    assert "-NatName 'lab-nat'" in command and "-Gateway '172.30.8.1'" in command and "-PrefixLength '22'" in command


def test_dry_run_prints_the_command_and_the_script_and_runs_nothing(capsys):
    calls = []
    network.network_up(cfg_with(), dry_run=True, runner=lambda s: calls.append(s) or (0, ""))
    out = capsys.readouterr().out
    assert calls == []
    assert "powershell.exe -NoProfile -ExecutionPolicy Bypass -Command -" in out
    assert network.network_up_command(cfg_with()) in out and "New-NetNat" in out


def test_runs_the_command_through_the_runner_and_reports_missing_rights():
    seen = []
    network.network_up(cfg_with(), runner=lambda s: (seen.append(s), (0, "network-up: ready"))[1])
    assert seen == [network.network_up_command(cfg_with())]
    with pytest.raises(K4wError, match="Administrator rights"):
        network.network_up(cfg_with(), runner=lambda s: (2, "needs Administrator"))
    with pytest.raises(K4wError, match="exit 1"):
        network.network_up(cfg_with(), runner=lambda s: (1, "NetNat 'DockerNAT' overlaps"))


@pytest.mark.skipif(platform.system() == "Windows", reason="checks the refusal on non-Windows hosts")
def test_refuses_clearly_on_a_non_windows_host():
    with pytest.raises(K4wError, match=r"not a Windows Hyper-V host.*--dry-run"):
        network.network_up(cfg_with())


def test_switch_check_script_parses():
    script = network.switch_check_script(cfg_with())
    assert powershell.parse_text_errors(script) == [] and re.search(r"exit 3", script)


@pytest.mark.parametrize("actual, configured, ok", [
    ("Internal", {}, True),
    ("External", {}, False),
    ("External", {"hyperv.cluster_switch_type": "External", "hyperv.cluster_adapter": "Ethernet"}, True),
    ("Internal", {"hyperv.cluster_switch_type": "External", "hyperv.cluster_adapter": "Ethernet"}, False),
])
def test_doctor_holds_the_cluster_switch_to_its_configured_kind(monkeypatch, actual, configured, ok):
    from k4w.commands import doctor

    monkeypatch.setattr(doctor, "_is_windows", lambda: True)
    monkeypatch.setattr(doctor, "_powershell", lambda script: (0, actual))   # Get-VMSwitch ... SwitchType
    check = next(c for c in doctor.switch_checks(cfg_with(**configured)) if c.name.startswith("cluster switch"))
    assert check.ok == ok
    if not ok:
        assert f"{actual}, but hyperv.cluster_switch_type is" in check.detail and f"cluster_switch_type: {actual}" in check.fix
