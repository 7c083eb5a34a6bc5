"""vagrant/Vagrantfile: valid Ruby that `vagrant validate` accepts, reading every cluster.json
field it needs, and a Hyper-V trigger script that is valid, idempotent PowerShell."""

from __future__ import annotations

import json
import re
import subprocess

from k4w.validate import powershell_rules as powershell
from tests.cluster.conftest import LINUX_ONLY_VXLAN, render_to
from tests.helpers import ROOT, system_tool


def test_vagrantfile_is_valid_ruby():
    ruby = system_tool("ruby")
    proc = subprocess.run([ruby, "-c", str(ROOT / "vagrant" / "Vagrantfile")], capture_output=True, text=True)
    assert proc.returncode == 0 and "Syntax OK" in proc.stdout, proc.stderr


def test_vagrant_validate_accepts_a_linux_only_cluster(tmp_path):
    vagrant = system_tool("vagrant")
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
    ruby = system_tool("ruby")
    _, out = default_render
    probe = tmp_path / "probe.rb"
    # Load the real Vagrantfile with Vagrant.configure stubbed, then print the trigger script for
    # a switch name that needs escaping.
    probe.write_text(
        "module Vagrant; def self.configure(*); end; end\n"
        f"load {json.dumps(str(ROOT / 'vagrant' / 'Vagrantfile'))}\n"
        "print cluster_nic_script(\"k4w-worker-win\", \"it's $(x)\", true)\n"
    )
    env = {"PATH": "/usr/bin:/bin", "K4W_CLUSTER_JSON": str(out / "vagrant" / "cluster.json")}
    proc = subprocess.run([ruby, str(probe)], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    script = proc.stdout
    assert powershell.parse_text_errors(script) == []
    assert "-SwitchName 'it''s $(x)'" in script
    # Found by adapter name: after a cold start Vagrant has moved every adapter to the management
    # switch, so a lookup by switch would miss the NIC and add another one on every boot.
    assert "$nics = @(Hyper-V\\Get-VMNetworkAdapter -VM $vm | Where-Object { $_.Name -eq 'k4w-cluster' })" in script
    # Added only when there is none; otherwise reconnected to the cluster switch, same adapter and MAC.
    add = script.index("Add-VMNetworkAdapter")
    assert script.count("Add-VMNetworkAdapter") == 1 and script.rindex("if ($nics.Count -eq 0)", 0, add) < add
    assert re.search(r"elseif \(\$nics\[0\]\.SwitchName -ne 'it''s \$\(x\)'\) \{\s*Hyper-V\\Connect-VMNetworkAdapter "
                     r"-VMNetworkAdapter \$nics\[0\] -SwitchName 'it''s \$\(x\)'", script), script
    # NICs a former trigger piled up are removed, keeping the first.
    assert re.search(r"if \(\$nics\.Count -gt 1\) \{[^}]*Select-Object -Skip 1 \| Hyper-V\\Remove-VMNetworkAdapter", script, re.S)
    assert "if ($nic.MacAddressSpoofing -ne $spoofing)" in script and "$spoofing = 'On'" in script
