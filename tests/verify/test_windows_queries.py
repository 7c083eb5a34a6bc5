"""Every PowerShell the Windows spec and the probes send is valid PowerShell and fits cmd.exe."""

from __future__ import annotations

import base64

import pytest

from k4w.validate import powershell_rules as powershell
from k4w.verify import probes, winps, windows_queries as q

# cmd.exe's command-line limit (Microsoft: "Command prompt (Cmd.exe) command-line string
# limitation", 8191 characters); testinfra's winrm backend runs every command through it.
CMD_LIMIT = 8191

QUERIES = {
    "windows_feature": q.windows_feature("Containers"),
    "services": q.services(["docker", "kubelet", "kube-proxy", "flanneld"]),
    "nssm_parameters": q.nssm_parameters(["kubelet", "kube-proxy", "flanneld"]),
    "scheduled_task": q.scheduled_task("k4w-node-start"),
    "native": q.native("C:\\k\\kubelet.exe", ["--version"]),
    "files_exist": q.files_exist(["C:\\k\\start-node.ps1", "C:\\k\\it's.ps1"]),
    "file_text": q.file_text("C:\\k\\box-release.json"),
    "firewall_port_rules": q.firewall_port_rules(["30000-32767"]),
    "firewall_profiles": q.firewall_profiles(),
    "defender_exclusions": q.defender_exclusions(),
    "machine_proxy": q.machine_proxy(),
    "winrm_exposure": q.winrm_exposure(),
    "folder_acls": q.folder_acls(["C:\\k", "C:\\etc\\kubernetes"]),
    "probe_by_name": probes.windows_body("http://win-webserver.default.svc.cluster.local:80/", "win-webserver.default.svc.cluster.local"),
    "probe_by_ip": probes.windows_body("http://10.244.1.5:80/", None),
    "tcp_probe": probes.windows_tcp_body("192.168.250.21", 5986),
}


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_query_parses_as_powershell(name, tmp_path):
    script = winps.wrap(QUERIES[name])
    assert powershell.parse_text_errors(script) == []
    path = tmp_path / f"{name}.ps1"
    path.write_text(script, encoding="utf-8")
    assert powershell.lint_errors(path) == []  # what PowerShell refuses but the grammar accepts


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_query_command_line_fits_cmd_exe(name):
    line = winps.command_line(QUERIES[name])
    assert len(line) < CMD_LIMIT, f"{name}: {len(line)} characters"
    encoded = line.rsplit(" ", 1)[1]
    assert base64.b64decode(encoded).decode("utf-16-le") == winps.wrap(QUERIES[name])


def test_literals_are_quoted_for_powershell():
    # A single quote in a path must not end the string (PowerShell doubles it).
    assert "'C:\\k\\it''s.ps1'" in QUERIES["files_exist"]


def test_output_parsing():
    assert winps.parse_output('\ufeff{"a": 1}\r\n', "", 0, "q") == {"a": 1}
    assert winps.parse_output("", "", 0, "q") is None
    with pytest.raises(winps.PowerShellError, match="exited 1: boom"):
        winps.parse_output("", "boom", 1, "q")
    with pytest.raises(winps.PowerShellError, match="not JSON"):
        winps.parse_output("Get-Service : Cannot find any service", "", 0, "q")
    assert winps.as_list(None) == [] and winps.as_list({"a": 1}) == [{"a": 1}] and winps.as_list([1]) == [1]


def test_powershell_errors_redact_proxy_credentials():
    with pytest.raises(winps.PowerShellError) as err:
        winps.parse_output("", "proxy http://bob:hunter2@proxy:3128 refused", 1, "q")
    assert "hunter2" not in str(err.value)
