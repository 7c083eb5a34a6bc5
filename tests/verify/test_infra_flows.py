"""test-box, cluster-test and the ssh-target run, with a recorded `vagrant` and the real specs.

The guests are unreachable here (closed ports), so every spec fails: exactly what lets these
tests check that failures are recorded and reported, and that the VM is destroyed anyway.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from k4w import render
from k4w.cluster_model import Cluster
from k4w.sources import REPO_ROOT as ROOT
from k4w.errors import K4wError
from k4w.verify import flows, throwaway

FAKE = Path(__file__).parent / "fake_vagrant.py"


@pytest.fixture
def fake_vagrant(tmp_path, monkeypatch, closed_port):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "vagrant"
    exe.write_text(f"#!{sys.executable}\nimport runpy\nrunpy.run_path({str(FAKE)!r}, run_name='__main__')\n")
    exe.chmod(0o755)
    log = tmp_path / "vagrant-calls.jsonl"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_VAGRANT_LOG", str(log))
    monkeypatch.setenv("FAKE_VAGRANT_TARGET_PORT", str(closed_port))

    def calls():
        return [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []

    return calls


@pytest.fixture
def built(tmp_path):
    """A rendered OUT with a box catalogue and a build record, as the build runner leaves them."""
    cluster = Cluster.load(ROOT / "cluster.yml")
    out = tmp_path / "build"
    render.render(cluster, out)
    boxes = out / "boxes"
    boxes.mkdir()
    for box in cluster.profiles:
        versions = [{"version": v, "providers": [{"name": "hyperv", "url": "file:///x.box"}]} for v in ("20261120.101010", "20261121.090000")]
        (boxes / f"{box}.json").write_text(json.dumps({"name": f"k4w/{box}", "versions": versions}))
        (boxes / f"{box}.record.json").write_text(json.dumps({"box": box, "version": "20261121.090000", "test": None}))
    return cluster, out


def test_generated_vagrantfile_is_valid_ruby_and_pins_the_new_box(built, tmp_path):
    cluster, out = built
    ruby = shutil.which("ruby")
    if not ruby:
        pytest.fail("ruby is missing: apt-get install -y ruby")
    from k4w import profiles

    for box in cluster.profiles:
        profile = profiles.load(box)
        ref = throwaway.box_ref(out, profile)
        assert (ref.name, ref.version) == (f"k4w/{box}", "20261121.090000")
        text = throwaway.vagrantfile(ref, profile, "k4w-test-it's", "Default Switch")
        path = tmp_path / f"{box}.Vagrantfile"
        path.write_text(text)
        proc = subprocess.run([ruby, "-c", str(path)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        assert "config.vm.box_version = '20261121.090000'" in text
        assert "hv.vmname = 'k4w-test-it\\'s'" in text
        assert ("config.ssh.insert_key = false" in text) is (not profile.is_windows)


def test_box_without_a_catalogue_names_the_build_task(tmp_path):
    from k4w import profiles

    with pytest.raises(K4wError, match="invoke build-windows"):
        throwaway.box_ref(tmp_path, profiles.load("windows-1803"))


def test_test_box_destroys_the_vm_and_records_a_failing_spec(built, fake_vagrant):
    cluster, out = built
    with pytest.raises(K4wError, match="box ubuntu-1604: 0 failed, \\d+ errors"):
        flows.test_box(cluster, "ubuntu-1604", out)
    commands = [c["argv"][0] for c in fake_vagrant()]
    assert commands == ["up", "ssh-config", "destroy"]
    workdir = Path(fake_vagrant()[0]["cwd"])
    assert not workdir.exists()  # removed once the VM is destroyed
    record = json.loads((out / "boxes" / "ubuntu-1604.record.json").read_text())
    assert record["box"] == "ubuntu-1604"  # the build runner's fields stay
    test = record["test"]
    assert test["result"] == "failed" and test["passed"] == 0 and test["errors"] > 0
    assert test["target"] == "throwaway VM from k4w/ubuntu-1604 20261121.090000"
    assert Path(test["junit"]).is_file()


def test_test_box_destroys_the_vm_when_it_does_not_boot(built, fake_vagrant, monkeypatch):
    cluster, out = built
    monkeypatch.setenv("FAKE_VAGRANT_UP_RC", "1")
    with pytest.raises(K4wError, match="could not run"):
        flows.test_box(cluster, "windows-1803", out)
    assert [c["argv"] for c in fake_vagrant()] == [["up", "--provider", "hyperv"], ["destroy", "--force"]]
    test = json.loads((out / "boxes" / "windows-1803.record.json").read_text())["test"]
    assert test["result"] == "failed" and "vagrant up --provider hyperv exited 1" in test["error"]


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
    calls = fake_vagrant()
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
    assert "vagrant up --provider hyperv" in printed and "vagrant destroy --force" in printed
    assert "--hosts=ssh://default" in printed and "--k4w-stage=node" in printed
    assert "vagrant:vagrant" not in printed
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before
