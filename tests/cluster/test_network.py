"""`invoke network-up`: the generated PowerShell parses, checks rights first, and is idempotent."""

from __future__ import annotations

import platform
import re

import pytest
import yaml

from k4w import config as config_mod
from k4w.cluster import network
from k4w.errors import K4wError
from k4w.validate import powershell_rules as powershell
from tests.helpers import config_dict


def cfg_with(**overrides):
    return config_mod.parse(yaml.safe_dump(config_dict(**overrides)), "test.yml")


def test_script_parses_and_carries_the_config_values(tmp_path):
    script = network.network_up_script(cfg_with())
    assert powershell.parse_text_errors(script) == []
    generated = tmp_path / "network-up.ps1"
    generated.write_text(script)
    assert powershell.lint_errors(generated) == []
    for line in ("$SwitchName = 'k4w-cluster'", "$Gateway = '192.168.250.1'", "$PrefixLength = '24'",
                 "$NatName = 'k4w-nat'", "$NatPrefix = '192.168.250.0/24'"):
        assert line in script


def test_admin_rights_are_checked_before_anything_changes():
    script = network.network_up_script(cfg_with())
    admin = script.index("IsInRole([Security.Principal.WindowsBuiltInRole]::Administrator)")
    first_change = min(script.index(cmd) for cmd in ("New-VMSwitch", "New-NetIPAddress", "New-NetNat"))
    assert admin < first_change
    assert "exit 2" in script[admin:first_change]


@pytest.mark.parametrize("lookup, create", [
    ("$switch = Get-VMSwitch -Name $SwitchName", "if ($null -eq $switch) {\n    New-VMSwitch -Name $SwitchName -SwitchType Internal"),
    ("Where-Object { $_.IPAddress -eq $Gateway }", "if ($existing.Count -eq 0) {\n    New-NetIPAddress"),
    ("$nats = @(Get-NetNat", "New-NetNat -Name $NatName -InternalIPInterfaceAddressPrefix $NatPrefix"),
])
def test_every_object_is_created_only_when_absent(lookup, create):
    script = network.network_up_script(cfg_with())
    assert script.index(lookup) < script.index(create)


def test_overlapping_netnat_is_detected_by_name():
    script = network.network_up_script(cfg_with())
    assert "$wanted.First -le $other.Last -and $other.First -le $wanted.Last" in script
    assert "overlaps ${NatPrefix}" in script
    # the overlap scan runs before New-NetNat and only when our NAT does not exist yet
    assert script.index("foreach ($nat in $nats)") < script.index("New-NetNat -Name")


def test_values_are_escaped_for_powershell():
    cfg = cfg_with(**{"hyperv.cluster_switch": "it's $(evil)"})
    script = network.network_up_script(cfg)
    assert "$SwitchName = 'it''s $(evil)'" in script
    assert powershell.parse_text_errors(script) == []


def test_other_cluster_names_and_cidrs_flow_through():
    cfg = cfg_with(**{"cluster.name": "lab", "network.node_cidr": "172.30.8.0/22",
                      "nodes.0.ip": "172.30.8.10", "nodes.1.ip": "172.30.8.11", "nodes.2.ip": "172.30.8.21"})
    script = network.network_up_script(cfg)
    assert "$NatName = 'lab-nat'" in script and "$Gateway = '172.30.8.1'" in script and "$PrefixLength = '22'" in script


def test_dry_run_prints_the_script_and_runs_nothing(capsys):
    calls = []
    network.network_up(cfg_with(), dry_run=True, runner=lambda s: calls.append(s) or (0, ""))
    out = capsys.readouterr().out
    assert calls == [] and "New-NetNat" in out and "powershell.exe -NoProfile -ExecutionPolicy Bypass -Command -" in out


def test_runs_the_script_through_the_runner_and_reports_missing_rights():
    seen = []
    network.network_up(cfg_with(), runner=lambda s: (seen.append(s), (0, "network-up: ready"))[1])
    assert len(seen) == 1 and "New-VMSwitch" in seen[0]
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
