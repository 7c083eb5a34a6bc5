"""Issue 11 item 9: Windows Firewall must let build VMs reach Packer's HTTP server.

The Packer template pins the port range, network-up creates an inbound rule for exactly that
range, and doctor checks it (and a Block rule for packer.exe, which wins over any allow rule).
The PowerShell cannot run here: it is parsed and linted, and the Python side is tested at the
powershell.exe boundary.
"""

from __future__ import annotations

import dataclasses
import re

import pytest

from k4w.commands import doctor
from k4w.infra import packer_hcl
from k4w.render import packer_http
from k4w.infra import sources
from k4w.cluster import network
from k4w.derive.cluster import Cluster
from k4w.validate import powershell_rules as powershell
from tests.helpers import config_dict, invoke, write_config

SCRIPT = sources.REPO.host / packer_http.SCRIPT
DEFAULT_CONFIG = sources.REPO.root / "cluster.yml"


def test_the_ubuntu_template_pins_the_port_range_the_rule_admits(tmp_path):
    cfg = write_config(tmp_path / "cluster.yml", config_dict())
    result = invoke("render", "--config", str(cfg), "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    builder = packer_hcl.load(tmp_path / "out" / "packer" / "ubuntu-1604.pkr.hcl")["builders"][0]
    assert (builder["http_port_min"], builder["http_port_max"]) == (packer_http.PORT_MIN, packer_http.PORT_MAX)
    assert packer_http.port_range() == f"{builder['http_port_min']}-{builder['http_port_max']}"


def test_rule_script_parses_lints_and_declares_what_python_passes():
    text = SCRIPT.read_text(encoding="utf-8")
    assert powershell.parse_text_errors(text) == [] and powershell.lint_errors(SCRIPT) == []
    declared = set(re.findall(r"\[Parameter\(Mandatory = \$true\)\](?:\[\w+\(.*?\)\])?\[\w+\]\$(\w+)", text))
    assert declared == set(packer_http.rule_parameters("Default Switch"))
    assert f"exit {packer_http.MISSING}" in text and f"exit {packer_http.BLOCKED}" in text


def test_rule_admits_only_tcp_on_the_pinned_ports_on_the_build_switch_interface_and_is_created_only_when_wrong():
    text = SCRIPT.read_text(encoding="utf-8")
    create = text.index("New-NetFirewallRule")
    line = text[create:text.index("| Out-Null", create)]
    for option in ("-Direction Inbound", "-Action Allow", "-Protocol TCP", "-LocalPort $Ports", "-InterfaceAlias $InterfaceAlias"):
        assert option in line
    assert "-RemoteAddress" not in line  # issue 21.5: LocalSubnet admitted the host's LAN
    assert text.index("$problem = Get-RuleProblem\nif ($null -eq $problem)") < create
    # the check mode never needs rights and never changes anything
    check_block = text[text.index("if ($Check) {"):text.index("$problem = Get-RuleProblem\nif ($null -eq $problem)")]
    assert "New-NetFirewallRule" not in check_block and "Remove-NetFirewallRule" not in check_block
    # and it reports a rule that admits more than the one interface, e.g. one an older k4w made
    problem = text[text.index("function Get-RuleProblem"):text.index("function Get-PackerBlockRule")]
    assert "Get-NetFirewallInterfaceFilter" in problem and "Get-NetFirewallAddressFilter" in problem


@pytest.mark.parametrize("script", sorted(p.name for p in sources.REPO.host.glob("*.ps1")))
def test_no_host_firewall_rule_admits_a_whole_subnet(script):
    # The class of 21.5: every inbound allow rule a host script makes names its interface.
    text = (sources.REPO.host / script).read_text(encoding="utf-8")
    for match in re.finditer(r"New-NetFirewallRule(?:[^\n]*`\n)*[^\n]*", text):
        call = match.group(0)
        assert "LocalSubnet" not in call and "-InterfaceAlias" in call, f"{script}: {call}"


def test_the_interface_is_the_management_switch_vnic():
    cfg = Cluster.load(DEFAULT_CONFIG).config
    assert packer_http.rule_parameters(cfg.hyperv.management_switch)["InterfaceAlias"] == "vEthernet (Default Switch)"


def test_network_up_runs_the_rule_script_with_the_same_values():
    text = (sources.REPO.host / "network-up.ps1").read_text(encoding="utf-8")
    assert "& (Join-Path $PSScriptRoot 'packer-http-rule.ps1') -RuleName $PackerRuleName -Ports $PackerPorts" in text
    cfg = Cluster.load(DEFAULT_CONFIG).config
    command = network.network_up_command(cfg)
    assert (f"-PackerRuleName '{packer_http.RULE_NAME}' -PackerPorts '{packer_http.port_range()}' "
            "-PackerInterfaceAlias 'vEthernet (Default Switch)'") in command


@pytest.mark.parametrize("code, fix", [
    (0, ""),
    (packer_http.MISSING, "invoke network-up"),
    (packer_http.BLOCKED, "Block rule"),
])
def test_doctor_reports_the_rule_on_a_windows_host(monkeypatch, code, fix):
    seen = []

    def powershell_exe(script):
        seen.append(script)
        return code, {0: "rule ok", 3: "no firewall rule 'k4w-packer-http'", 4: "inbound Block rule for packer.exe: packer"}[code]

    monkeypatch.setattr(doctor, "_is_windows", lambda: True)
    monkeypatch.setattr(doctor, "_powershell", powershell_exe)
    cluster = Cluster.load(DEFAULT_CONFIG)
    [check] = doctor.firewall_checks(cluster)
    assert seen == [packer_http.check_command(SCRIPT, "Default Switch")] and powershell.parse_text_errors(seen[0]) == []
    assert "-InterfaceAlias 'vEthernet (Default Switch)'" in seen[0]
    assert check.ok == (code == 0) and check.required_for("build") and not check.required_for("cluster")
    assert fix in check.fix


def test_doctor_skips_the_rule_when_no_box_uses_packer_http(monkeypatch):
    monkeypatch.setattr(doctor, "_is_windows", lambda: True)
    monkeypatch.setattr(doctor, "_powershell", lambda script: pytest.fail("no PowerShell expected"))
    cluster = Cluster.load(DEFAULT_CONFIG)
    windows_only = {box: prof for box, prof in cluster.profiles.items() if prof.is_windows}
    assert doctor.firewall_checks(dataclasses.replace(cluster, profiles=windows_only)) == []
