"""test-box, cluster-test and the ssh-target run, with a recorded `vagrant` and the real specs.

The guests are unreachable here (closed ports), so every spec fails: exactly what lets these
tests check that failures are recorded and reported, and that the VM is destroyed anyway.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from k4w import render
from k4w.derive.cluster import Cluster
from k4w.infra.sources import REPO_ROOT as ROOT
from k4w.infra.errors import K4wError
from k4w.verify import flows
from tests.fakes.vagrant import VagrantOnPath


@pytest.fixture
def fake_vagrant(tmp_path, monkeypatch, closed_port) -> VagrantOnPath:
    monkeypatch.setenv("FAKE_VAGRANT_TARGET_PORT", str(closed_port))
    return VagrantOnPath(tmp_path, monkeypatch)


def test_test_box_destroys_the_vm_and_records_a_failing_spec(built, fake_vagrant):
    cluster, out = built
    with pytest.raises(K4wError, match="box ubuntu-1604: 0 failed, \\d+ errors"):
        flows.test_box(cluster, "ubuntu-1604", out)
    commands = [c["argv"][0] for c in fake_vagrant.calls()]
    assert commands == ["up", "ssh-config", "destroy"]
    workdir = Path(fake_vagrant.calls()[0]["cwd"])
    assert not workdir.exists()  # removed once the VM is destroyed
    record = json.loads((out / "boxes" / "ubuntu-1604.record.json").read_text())
    assert record["box"] == "ubuntu-1604"  # the build runner's fields stay
    test = record["test"]
    assert test["result"] == "failed" and test["passed"] == 0 and test["errors"] > 0
    assert test["target"] == "throwaway VM from k4w/ubuntu-1604 20261121.090000"
    assert Path(test["junit"]).is_file()


def test_test_box_destroys_the_vm_when_it_does_not_boot(built, fake_vagrant, monkeypatch):
    cluster, out = built
    fake_vagrant.scenario({"fail": [{"pattern": "^up", "exit": 1, "output": "Hyper-V import failed"}]})
    with pytest.raises(K4wError, match="could not run"):
        flows.test_box(cluster, "windows-1803", out)
    assert [c["argv"] for c in fake_vagrant.calls()] == [["up", "--provider=hyperv"], ["destroy", "--force"]]
    test = json.loads((out / "boxes" / "windows-1803.record.json").read_text())["test"]
    assert test["result"] == "failed" and "vagrant up --provider=hyperv exited 1" in test["error"]


def test_ssh_target_run_records_against_the_box(built, closed_port, tmp_path):
    cluster, out = built
    key = tmp_path / "key"
    key.write_text("x")
    with pytest.raises(K4wError, match=r"box ubuntu-1604 \(ssh vagrant@127.0.0.1:\d+\): 0 failed"):
        flows.test_ssh_target(cluster.config, "ubuntu-1604", "127.0.0.1", closed_port, "vagrant", key, out)
    test = json.loads((out / "boxes" / "ubuntu-1604.record.json").read_text())["test"]
    assert test["target"] == f"ssh vagrant@127.0.0.1:{closed_port}" and test["result"] == "failed"


def test_cluster_test_runs_every_suite_and_writes_the_summary(built, fake_vagrant):
    cluster, out = built
    with pytest.raises(K4wError, match="cluster-test: .* did not pass"):
        flows.cluster_test(cluster, out)
    calls = fake_vagrant.calls()
    assert [c["argv"] for c in calls] == [["ssh-config", "master", "worker-linux"], ["winrm-config", "worker-win"]]
    assert all(c["cluster_json"] == str(out / "vagrant" / "cluster.json") for c in calls)
    assert all(Path(c["cwd"]) == ROOT / "vagrant" for c in calls)
    summary = (out / "reports" / "cluster-test.md").read_text()
    assert "| nodes ubuntu-1604 | failed | 0 |" in summary
    assert "| nodes windows-1803 | failed | 0 |" in summary
    # No kubeconfig in this OUT: the cluster suite could not run, and says so.
    assert "| cluster | failed | 0 | 0 | 1 |" in summary and "no kubeconfig" in summary
    assert (out / "reports" / "cluster-test-nodes-ubuntu-1604.xml").is_file()
    assert "vagrant:vagrant" not in summary


def test_dry_runs_print_commands_and_change_nothing(built, capsys):
    cluster, out = built
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    flows.test_box(cluster, "ubuntu-1604", out, dry_run=True)
    flows.cluster_test(cluster, out, dry_run=True)
    printed = capsys.readouterr().out
    assert "vagrant up --provider=hyperv" in printed and "vagrant destroy --force" in printed
    assert "--hosts=ssh://default" in printed and "--k4w-stage=node" in printed
    assert "vagrant:vagrant" not in printed
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before


def test_cluster_test_on_libvirt_gives_testinfra_one_shared_connection_per_node(tmp_path, fake_vagrant, built):
    """testinfra asks ssh for ControlMaster but names no ControlPath, so every check of a libvirt cluster's
    node (about 15 s each under TCG, the fifth run) opened its own connection; the ssh-config cluster-test
    writes there names a socket folder for every host, as the real ssh reads it (`ssh -G`)."""
    import subprocess

    from tests.cluster.conftest import libvirt_config, render_to

    out = tmp_path / "libvirt-out"
    model = render_to(out, libvirt_config())
    with pytest.raises(K4wError, match="did not pass"):
        flows.cluster_test(model, out)
    linux = [n.name for n in model.config.nodes if not model.profile(n.box).is_windows]
    for name in linux:
        seen = subprocess.run(["ssh", "-G", "-F", str(out / "cluster-test" / "ssh-config"), name],
                              capture_output=True, text=True, check=True).stdout
        assert "\ncontrolmaster auto\n" in seen and re.search(r"^controlpath /\S*/k4w-ssh-\w+/", seen, re.M), seen
    _, hyperv_out = built
    with pytest.raises(K4wError, match="did not pass"):
        flows.cluster_test(built[0], hyperv_out)
    seen = subprocess.run(["ssh", "-G", "-F", str(hyperv_out / "cluster-test" / "ssh-config"), "master"],
                          capture_output=True, text=True, check=True).stdout
    assert "\ncontrolpath" not in seen   # Windows hosts' OpenSSH: one connection per check, as before
