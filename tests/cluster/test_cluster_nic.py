"""The cluster NIC, attached from the host by cluster-up on every run (host/cluster-nic.ps1), with a
static MAC k4w derives from the node, by which the guests find it (cluster-ip.sh / cluster-ip.ps1)."""

from __future__ import annotations

import re

import yaml

from k4w.model import config as config_mod
from k4w.infra import sources
from k4w.cluster import network
from k4w.cluster.machines import cluster_nic_mac, mac_with
from k4w.validate import powershell_rules as powershell
from tests.helpers import config_dict

SCRIPT = sources.REPO.host / "cluster-nic.ps1"


def script() -> str:
    return SCRIPT.read_text(encoding="utf-8")


def test_script_parses_lints_and_has_the_standard_header():
    assert powershell.parse_text_errors(script()) == []
    assert powershell.lint_errors(SCRIPT) == []
    text = script()
    assert "$ErrorActionPreference = 'Stop'" in text and "Set-StrictMode -Version Latest" in text
    assert re.search(r"^trap \{", text, re.M) and "PositionMessage" in text


def test_every_parameter_the_command_passes_is_a_mandatory_parameter_of_the_script():
    declared = set(re.findall(r"\[Parameter\(Mandatory = \$true\)\](?:\[\w+\(.*?\)\])?\[\w+\]\$(\w+)", script()))
    cfg = config_mod.parse(yaml.safe_dump(config_dict()), "test.yml")
    assert declared == set(network.cluster_nic_parameters(cfg, "k4w-master", "02EF07A4AD4C", False))


def test_the_command_escapes_every_value():
    cfg = config_mod.parse(yaml.safe_dump(config_dict(**{"hyperv.cluster_switch": "it's $(x)"})), "test.yml")
    command = network.cluster_nic_command(cfg, "k4w-worker-win", "02C603E68ABF", True)
    assert powershell.parse_text_errors(command) == []
    assert "-SwitchName 'it''s $(x)'" in command and "-MacSpoofing 'On'" in command
    assert command.endswith("; exit $LASTEXITCODE")   # "not elevated" (2) must reach cluster-up


def test_macs_are_locally_administered_unicast_stable_and_distinct():
    macs = {node: cluster_nic_mac("k4w", node) for node in ("master", "worker-linux", "worker-win", "w1", "w2")}
    assert all(re.fullmatch(r"[0-9A-F]{12}", mac) for mac in macs.values())    # Hyper-V's -StaticMacAddress form
    assert all(int(mac[:2], 16) & 0b11 == 0b10 for mac in macs.values())       # local bit set, group bit clear
    assert len(set(macs.values())) == len(macs) and cluster_nic_mac("k4w", "master") == macs["master"]
    assert cluster_nic_mac("other", "master") != macs["master"]
    assert mac_with("02C603E68ABF", ":") == "02:c6:03:e6:8a:bf" and mac_with("02C603E68ABF", "-") == "02-C6-03-E6-8A-BF"


def test_rights_are_checked_before_anything_changes():
    text = script()
    check = text.index("IsInRole([Security.Principal.WindowsBuiltInRole]::Administrator)")
    first_change = min(text.index(cmd) for cmd in ("Add-VMNetworkAdapter", "Connect-VMNetworkAdapter",
                                                   "Remove-VMNetworkAdapter", "Set-VMNetworkAdapter"))
    assert check < first_change and f"exit {network.NOT_ELEVATED}" in text[check:first_change]
    assert "'S-1-5-32-578'" in text   # Hyper-V Administrators, as Vagrant accepts


def test_each_change_is_made_only_where_the_adapter_differs():
    """Idempotent: found by its name (Vagrant moves every adapter to the management switch on a
    cold start, so a lookup by switch would add another NIC on every boot), added only when
    absent, re-added only with a wrong MAC, reconnected only on another switch, spoofing set only
    when different."""
    text = script()
    assert "$nics = @(Hyper-V\\Get-VMNetworkAdapter -VM $vm | Where-Object { $_.Name -eq $AdapterName })" in text
    body = text[text.index("$nics = @("):]
    assert re.search(r"if \(\$nics\.Count -eq 0\) \{\s*Add-ClusterAdapter", body)
    assert re.search(r"elseif \(\$nics\[0\]\.DynamicMacAddressEnabled -or \$nics\[0\]\.MacAddress -ne \$MacAddress\)", body)
    assert re.search(r"elseif \(\$nics\[0\]\.SwitchName -ne \$SwitchName\) \{\s*Hyper-V\\Connect-VMNetworkAdapter", body)
    assert "if ([string]$nic.MacAddressSpoofing -ne $MacSpoofing)" in body
    assert text.count("Hyper-V\\Add-VMNetworkAdapter") == 1 and "-StaticMacAddress $MacAddress" in text


def test_a_generation_1_vm_that_runs_is_refused_with_the_reason_before_a_hot_add():
    text = script()
    add = text.index("Hyper-V\\Add-VMNetworkAdapter")
    guard = text.rindex("if ($vm.Generation -ne 2 -and $vm.State -ne 'Off')", 0, add)
    assert "cannot hot-add a network adapter" in text[guard:add]
