"""The guest scripts and the Vagrantfile, checked by the programs that read them."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from tests.cluster.conftest import LINUX_ONLY_VXLAN, render_to
from tests.cluster.pwsh_parse import parse_errors
from tests.helpers import ROOT

POWERSHELL = [
    ROOT / "provision" / "windows" / "node" / "start-node.ps1",
    ROOT / "provision" / "windows" / "cluster-ip.ps1",
    ROOT / "provision" / "windows" / "cluster-join.ps1",
    ROOT / "provision" / "windows" / "cluster-reset.ps1",
]
BASH = sorted((ROOT / "provision" / "ubuntu").glob("cluster-*.sh"))
START_NODE = POWERSHELL[0].read_text()


def need(tool: str, install: str) -> str:
    path = shutil.which(tool)
    if not path:
        pytest.fail(f"{tool} is not installed: {install}")
    return path


@pytest.mark.parametrize("script", POWERSHELL, ids=lambda p: p.name)
def test_powershell_parses_and_has_the_standard_header(script):
    text = script.read_text()
    assert parse_errors(text) == []
    from k4w.checks import powershell  # the project's extra Windows PowerShell rules

    assert powershell.lint_errors(script) == []
    assert "$ErrorActionPreference = 'Stop'" in text and "Set-StrictMode -Version Latest" in text
    assert re.search(r"^trap \{", text, re.M), "needs a trap printing the error and its position"
    assert "PositionMessage" in text


@pytest.mark.parametrize("script", BASH, ids=lambda p: p.name)
def test_bash_passes_shellcheck_and_has_the_standard_header(script):
    shellcheck = need("shellcheck", "apt-get install -y shellcheck")
    proc = subprocess.run([shellcheck, "-x", "--severity=style", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout
    text = script.read_text()
    assert "set -euo pipefail" in text and "trap '" in text and " ERR" in text


def test_bash_scripts_exist():
    assert {p.name for p in BASH} == {"cluster-init.sh", "cluster-ip.sh", "cluster-join.sh", "cluster-reset.sh"}


# ------------------------------------------------------------------ start-node.ps1 behaviour

def test_start_node_does_nothing_without_config():
    # The absent-config exit comes before any service, registry or HNS call.
    exit_at = START_NODE.index("has not joined a cluster, nothing to start")
    first_action = min(START_NODE.index(word, START_NODE.index("# ----")) for word in ("Set-ServiceConfig $service", "Start-Service"))
    assert exit_at < first_action
    block = START_NODE[START_NODE.index("if (-not (Test-Path -LiteralPath $ConfigDir))"):exit_at + 80]
    assert "exit 0" in block


def test_start_node_order_is_docker_kubelet_kube_proxy_flanneld_after_cleanup():
    body = START_NODE[START_NODE.index("# ---------------------------------------------------------------- 2. clean slate"):]
    positions = [body.index(s) for s in ("kube-cleanup.ps1", "Start-Service -Name 'docker'", "Start-Service -Name 'kubelet'",
                                          "Start-Service -Name 'kube-proxy'", "Start-Flanneld\n")]
    assert positions == sorted(positions)
    waits = [body.index(s) for s in ("'docker answers'", "registered\"", "'kube-proxy running'", "Flannel network")]
    assert waits == sorted(waits)
    assert "Start-Sleep -Seconds $PollSeconds" in START_NODE and not re.search(r"Start-Sleep -Seconds \d", START_NODE), \
        "only condition polling, no fixed sleeps"


def _route_error_pattern() -> str:
    return re.search(r"\$FlannelRouteErrorPattern = '([^']+)'", START_NODE).group(1)


@pytest.mark.parametrize("line, retried", [
    ("E0712 10:01:02.123 route_windows.go:63] Failed to add route: New-NetRoute : Element not found. (Windows System Error 1168)", True),
    ("error adding route via New-NetRoute: 1168", True),
    ("E0712 subnet.go:210] failed to acquire lease: node \"worker-win\" pod cidr not assigned", False),
    ("New-NetRoute : The object already exists (Windows System Error 5010)", False),
    ("I0712 flanneld started; 1168 leases renewed", False),
])
def test_flanneld_is_restarted_only_for_the_new_netroute_1168_error(line, retried):
    # .NET and Python regexes agree on this pattern's syntax (alternation, .*, literals).
    assert bool(re.search(_route_error_pattern(), line)) is retried


def test_flanneld_restart_happens_once_and_only_behind_the_1168_match():
    body = START_NODE[START_NODE.index("$script:FlannelRetried = $false"):]
    guard = body.index("Select-String -Pattern $FlannelRouteErrorPattern")
    restart = body.index("Stop-NodeService 'flanneld'")
    assert guard < body.index("if ($script:FlannelRetried)") < body.index("throw 'flanneld failed again") < restart
    assert START_NODE.count("Stop-NodeService 'flanneld'") == 1 and START_NODE.count("Restart-Service") == 0


def test_start_node_sets_nssm_parameters_only_when_they_differ():
    assert "if ((Get-NssmParameter $Service 'AppParameters') -ne $wantedParameters)" in START_NODE
    assert "-Type ExpandString" in START_NODE and "-Type MultiString" in START_NODE


# ------------------------------------------------------------------ Vagrantfile

def test_vagrantfile_is_valid_ruby():
    ruby = need("ruby", "apt-get install -y ruby")
    proc = subprocess.run([ruby, "-c", str(ROOT / "vagrant" / "Vagrantfile")], capture_output=True, text=True)
    assert proc.returncode == 0 and "Syntax OK" in proc.stdout, proc.stderr


def test_vagrant_validate_accepts_a_linux_only_cluster(tmp_path):
    vagrant = need("vagrant", "apt-get install -y vagrant")
    out = tmp_path / "build"
    render_to(out, LINUX_ONLY_VXLAN)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "K4W_CLUSTER_JSON": str(out / "vagrant" / "cluster.json"),
           "VAGRANT_DOTFILE_PATH": str(tmp_path / "dot"), "VAGRANT_CHECKPOINT_DISABLE": "1"}
    # --ignore-provider: the hyperv provider refuses Linux hosts and libvirt needs a running libvirtd;
    # the core config (boxes, networks, triggers, synced folders) is still validated.
    proc = subprocess.run([vagrant, "validate", "--ignore-provider"], cwd=ROOT / "vagrant", env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "Vagrantfile validated successfully." in proc.stdout, proc.stdout + proc.stderr


def test_vagrantfile_reads_every_cluster_json_field_it_needs(default_render):
    _, out = default_render
    data = json.loads((out / "vagrant" / "cluster.json").read_text())
    text = (ROOT / "vagrant" / "Vagrantfile").read_text()
    for key in ("management_switch", "cluster_switch", "cluster"):
        assert (f'CLUSTER.fetch("{key}")' in text or f"CLUSTER.fetch('{key}')" in text) and key in data
    for key in ("name", "vmname", "box", "box_catalogue", "os", "cpus", "memory"):
        assert f'm.fetch("{key}")' in text or f"m.fetch('{key}')" in text
        assert key in data["machines"][0]
    assert "h.linked_clone = true" in text and "MacAddressSpoofing" in text and 'communicator = "winrm"' in text


def test_vagrant_trigger_powershell_parses_and_is_idempotent(tmp_path, default_render):
    ruby = need("ruby", "apt-get install -y ruby")
    _, out = default_render
    probe = tmp_path / "probe.rb"
    # Load the real Vagrantfile with Vagrant.configure stubbed, then print the trigger script for
    # a switch name that needs escaping.
    probe.write_text(
        "module Vagrant; def self.configure(*); end; end\n"
        f"load {json.dumps(str(ROOT / 'vagrant' / 'Vagrantfile'))}\n"
        "print attach_cluster_nic_script(\"k4w-worker-win\", \"it's $(x)\", true)\n"
    )
    env = {"PATH": "/usr/bin:/bin", "K4W_CLUSTER_JSON": str(out / "vagrant" / "cluster.json")}
    proc = subprocess.run([ruby, str(probe)], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    script = proc.stdout
    assert parse_errors(script) == []
    assert "-SwitchName 'it''s $(x)'" in script
    # attach only when absent, spoofing set only when different
    assert script.index("if ($null -eq $nic)") < script.index("Add-VMNetworkAdapter")
    assert "if ($nic.MacAddressSpoofing -ne $spoofing)" in script and "$spoofing = 'On'" in script
