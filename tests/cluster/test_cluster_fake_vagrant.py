"""cluster-up through the real python-vagrant driver and VagrantRemote, with a recorded fake
`vagrant` executable first on PATH: the exact argv that reaches Vagrant is what is asserted."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from k4w.cluster import machines, up as up_mod
from k4w.cluster.remote import RemoteError, VagrantRemote, powershell_wrapper
from k4w.errors import K4wError
from tests.cluster.fakes import FakeClock

FAKES = Path(__file__).parent / "fakes"


@pytest.fixture
def fake_vagrant(default_render, tmp_path, monkeypatch):
    cluster, out = default_render
    state_dir = tmp_path / "fake-vagrant"
    state_dir.mkdir()
    log = state_dir / "log.jsonl"
    # The fake, with this interpreter in its shebang (a pyenv/venv shim would cost ~0.2 s a call).
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "vagrant"
    source = (FAKES / "vagrant").read_text().split("\n", 1)[1]
    exe.write_text(f"#!{sys.executable} -S\nimport sys; sys.path.insert(0, {str(FAKES)!r})\n" + source)
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_VAGRANT_DIR", str(state_dir))
    monkeypatch.setenv("FAKE_VAGRANT_LOG", str(log))

    class Fake:
        def __init__(self):
            self.cluster, self.out, self.dir, self.log_path, self.exe = cluster, out, state_dir, log, exe

        def calls(self) -> list[list[str]]:
            return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

        def scenario(self, data: dict) -> None:
            (state_dir / "scenario.json").write_text(json.dumps(data))

        def up(self, **kw):
            return up_mod.cluster_up(cluster, out, validate=False, host=lambda s: (0, ""), clock=FakeClock(), **kw)

    return Fake()


def test_full_run_reaches_vagrant_with_the_expected_commands(fake_vagrant):
    fake_vagrant.up()
    calls = fake_vagrant.calls()
    verbs = [c[0] for c in calls]
    assert verbs[0] == "status" and verbs[1] == "up" and calls[1][1:] == ["--provider=hyperv"]
    ssh = [c for c in calls if c[0] == "ssh"]
    assert all(c[2:4] == ["--no-tty", "--command"] for c in ssh)
    winrm = [c for c in calls if c[0] == "winrm"]
    assert winrm and all(c[1] == "worker-win" and c[2:4] == ["--elevated", "--command"] for c in winrm)
    assert any("cluster-join.ps1" in c[4] for c in winrm)
    uploads = [c for c in calls if c[0] == "upload"]
    assert ["upload", str(fake_vagrant.out / "nodes" / "worker-win" / "cni.conf"), "C:\\k\\config\\cni.conf", "worker-win"] in uploads
    # the Vagrant environment points at the rendered cluster.json and keeps .vagrant out of render's folders
    env = machines.vagrant_env(fake_vagrant.out)
    assert env["K4W_CLUSTER_JSON"].endswith("vagrant/cluster.json") and env["VAGRANT_DOTFILE_PATH"].endswith("vagrant-state")


def test_second_run_sends_only_status_checks(fake_vagrant):
    fake_vagrant.up()
    before = len(fake_vagrant.calls())
    fake_vagrant.up()
    second = fake_vagrant.calls()[before:]
    assert [c[0] for c in second] == ["status", "ssh"]
    assert second[1][-1] == "kubectl get nodes -o json"


def test_resume_after_vagrant_up_fails(fake_vagrant):
    fake_vagrant.scenario({"fail": [{"pattern": "^up", "times": 1, "exit": 1, "output": "Hyper-V import failed"}]})
    with pytest.raises(K4wError, match="vagrant up failed with exit code 1"):
        fake_vagrant.up()
    assert not (fake_vagrant.out / "cluster-state.json").exists()
    fake_vagrant.up()
    assert json.loads((fake_vagrant.out / "cluster-state.json").read_text())["steps"]["demo"]


def test_windows_exit_code_comes_from_the_wrapper_marker(fake_vagrant):
    fake_vagrant.scenario({"fail": [{"pattern": "cluster-ip.ps1", "times": 1, "exit": 5,
                                     "output": "cluster-ip.ps1 failed: expected exactly one up adapter\n"}]})
    with pytest.raises(RemoteError) as err:
        fake_vagrant.up()
    assert err.value.node == "worker-win" and err.value.code == 5
    assert "expected exactly one up adapter" in str(err.value) and "k4w-exit-code" not in str(err.value)


def test_linux_failure_keeps_the_real_exit_code_and_redacts_the_proxy_password(fake_vagrant):
    fake_vagrant.scenario({"fail": [{"pattern": "bash /tmp/k4w/cluster-init.sh", "times": 1, "exit": 3,
                                     "output": "E: Failed to fetch via http://alice:Pa55word@10.0.0.5:8080/ (407)\n"}]})
    with pytest.raises(RemoteError) as err:
        fake_vagrant.up()
    assert err.value.node == "master" and err.value.code == 3
    assert "Pa55word" not in str(err.value) and "http://***@10.0.0.5:8080/" in str(err.value)


def test_powershell_wrapper_reports_native_exit_codes_and_exceptions():
    wrapped = powershell_wrapper("& 'C:\\k4w\\x.ps1' -A 'b'")
    from tests.cluster.pwsh_parse import parse_errors

    assert parse_errors(wrapped) == []
    assert "k4w-exit-code:" in wrapped and "catch" in wrapped


def test_vagrant_remote_uses_the_given_executable(tmp_path, fake_vagrant, monkeypatch):
    remote = VagrantRemote(str(fake_vagrant.exe), tmp_path, machines.vagrant_env(fake_vagrant.out))
    master = machines.load_cluster(fake_vagrant.out).master
    assert "kubeadm join 192.168.250.10:6443" in remote.run(master, "sudo kubeadm token create --print-join-command --ttl 1h")
