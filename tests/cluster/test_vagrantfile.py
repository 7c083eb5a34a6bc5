"""vagrant/Vagrantfile: valid Ruby (Vagrant's own validate: tests/validate/test_vagrant_validate.py),
reading every cluster.json field it needs, and no trigger left to attach the cluster NIC (cluster-up
does, host/cluster-nic.ps1)."""

from __future__ import annotations

import json
import re
import subprocess

from tests.helpers import ROOT, system_tool


def test_vagrantfile_is_valid_ruby():
    ruby = system_tool("ruby")
    proc = subprocess.run([ruby, "-c", str(ROOT / "vagrant" / "Vagrantfile")], capture_output=True, text=True)
    assert proc.returncode == 0 and "Syntax OK" in proc.stdout, proc.stderr


def test_vagrantfile_reads_every_cluster_json_field_it_needs(default_render):
    _, out = default_render
    data = json.loads((out / "vagrant" / "cluster.json").read_text())
    text = (ROOT / "vagrant" / "Vagrantfile").read_text()
    for key in ("management_switch", "cluster"):
        assert (f'CLUSTER.fetch("{key}")' in text or f"CLUSTER.fetch('{key}')" in text) and key in data
    for key in ("name", "vmname", "box", "box_catalogue", "os", "cpus", "memory"):
        assert f'm.fetch("{key}")' in text or f"m.fetch('{key}')" in text
        assert key in data["machines"][0]
    assert "h.linked_clone = true" in text and 'communicator = "winrm"' in text


def test_no_vagrant_trigger_touches_the_cluster_nic():
    """A trigger runs once per `vagrant up`; when it failed the machine stayed up without its cluster
    NIC and nothing fixed it. The NIC is cluster-up's host step now, on every run."""
    text = (ROOT / "vagrant" / "Vagrantfile").read_text()
    assert "trigger" not in re.sub(r"(?m)#.*$", "", text)
    assert not re.search(r"VMNetworkAdapter|cluster_switch", re.sub(r"(?m)#.*$", "", text))
