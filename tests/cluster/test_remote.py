"""cluster-up through the real Vagrant driver (k4w.infra.vagrant) and VagrantRemote, with the fake `vagrant`
executable (tests/fakes/vagrant.py) first on PATH: the exact argv that reaches Vagrant is what is asserted."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from k4w.cluster import machines, up as up_mod
from k4w.cluster.remote import RemoteError, VagrantRemote, powershell_wrapper
from k4w.infra.errors import K4wError
from k4w.infra.vagrant import Vagrant
from k4w.validate.powershell_rules import parse_text_errors
from tests.cluster.conftest import write_box_catalogues
from tests.fakes.cluster_world import FakeClock
from tests.fakes.vagrant import VagrantOnPath


@pytest.fixture
def fake_vagrant(default_render, tmp_path, monkeypatch):
    cluster, out = default_render

    class Fake(VagrantOnPath):
        def __init__(self):
            super().__init__(tmp_path, monkeypatch)
            self.cluster, self.out = cluster, out
            write_box_catalogues(out)

        def up(self, **kw):
            return up_mod.cluster_up(cluster, out, validate=False, host=lambda s: (0, ""), clock=FakeClock(), **kw)

    return Fake()


def test_full_run_reaches_vagrant_with_the_expected_commands(fake_vagrant):
    fake_vagrant.up()
    calls = fake_vagrant.argvs()
    assert calls[0] == ["status", "--machine-readable"]
    assert calls[1] == ["box", "list", "--machine-readable"]
    assert [c[:2] for c in calls[2:4]] == [["box", "add"]] * 2   # each box once, before the VMs boot at once
    # one `vagrant up NAME` per machine, started at once (tests/cluster/test_concurrent_up.py)
    assert sorted(calls[4:7]) == [["up", "--provider=hyperv", name] for name in ("master", "worker-linux", "worker-win")]
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


def test_second_run_checks_status_and_reapplies_the_cluster_ips(fake_vagrant):
    fake_vagrant.up()
    before = len(fake_vagrant.argvs())
    fake_vagrant.up()
    second = fake_vagrant.argvs()[before:]
    assert second[0][0] == "status" and {c[0] for c in second[1:]} <= {"ssh", "winrm", "upload"}
    # every node's static IP again (a host reboot may have dropped it), nothing else of the build
    assert [c[1] for c in second if c[0] in ("ssh", "winrm") and "cluster-ip" in c[-1]] == ["master", "worker-linux", "worker-win"]
    assert not any("kubeadm" in c[-1] or "cluster-join" in c[-1] for c in second)
    assert second[-1][-1] == "kubectl get nodes -o json"


def test_resume_after_vagrant_up_fails(fake_vagrant, capsys):
    fake_vagrant.scenario({"fail": [{"pattern": "^up .*worker-win", "times": 1, "exit": 1, "output": "Hyper-V import failed"}]})
    with pytest.raises(K4wError, match="(?s)vagrant up failed for 1 of 3 machines.*worker-win: .*vagrant up --provider=hyperv "
                                       "worker-win exited 1:.*Hyper-V import failed"):
        fake_vagrant.up()
    assert "Hyper-V import failed" in capsys.readouterr().out
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
    assert parse_text_errors(wrapped) == []
    assert "k4w-exit-code:" in wrapped and "catch" in wrapped


def test_vagrant_remote_uses_the_given_executable(tmp_path, fake_vagrant, monkeypatch):
    remote = VagrantRemote(Vagrant(tmp_path, machines.vagrant_env(fake_vagrant.out), exe=str(fake_vagrant.exe)))
    master = machines.load_cluster(fake_vagrant.out).master
    assert "kubeadm join 192.168.250.10:6443" in remote.run(master, "sudo kubeadm token create --print-join-command --ttl 1h")


def test_join_token_never_reaches_a_command_line(fake_vagrant):
    """sudo logs its command line to auth.log, and argv is visible to every process: each join
    reads a kubeadm join configuration (token inside) on standard input (Linux) or from an
    uploaded file it protects and deletes (Windows); no command passes --token."""
    from tests.fakes.cluster_answers import CA_HASH, TOKEN

    fake_vagrant.up()
    calls = fake_vagrant.calls()
    assert not [c["argv"] for c in calls if any(TOKEN in a or CA_HASH in a for a in c["argv"])]
    assert not [c["argv"] for c in calls if c["argv"][0] in ("ssh", "winrm") and "--token" in c["argv"][-1]]
    linux_join = next(c for c in calls if c["argv"][0] == "ssh" and "cluster-join.sh" in c["argv"][-1])
    sent = yaml.safe_load(linux_join["stdin"])
    assert sent["kind"] == "NodeConfiguration" and sent["token"] == TOKEN and sent["discoveryTokenCACertHashes"] == [CA_HASH]
    assert sent["nodeRegistration"]["name"] == "worker-linux" and sent["discoveryTokenAPIServers"] == ["192.168.250.10:6443"]
    assert all(c["stdin"] == "" for c in calls if c["argv"][0] == "ssh" and c is not linux_join)
    upload = next(c["argv"] for c in calls if c["argv"][0] == "upload" and c["argv"][2] == "C:\\k4w\\kubeadm-join.yaml")
    assert upload[-1] == "worker-win" and not __import__("os").path.exists(upload[1])   # the host copy is gone
    windows_join = next(c["argv"][-1] for c in calls if c["argv"][0] == "winrm" and "cluster-join.ps1" in c["argv"][-1])
    assert "-ConfigFile 'C:\\k4w\\kubeadm-join.yaml'" in windows_join


def test_only_stdout_is_parsed_while_vagrant_ssh_and_sudo_write_to_stderr(fake_vagrant, capsys):
    """The fake prints Vagrant's, ssh's and sudo's notices on stderr of every ssh/winrm call, as a
    real run does: the kubeconfig holds exactly what `cat admin.conf` printed, and the Ready wait
    and the summary read the nodes' JSON (a merged answer is neither YAML nor JSON)."""
    from tests.fakes.vagrant import STDERR_NOISE

    fake_vagrant.up()
    assert (fake_vagrant.out / "kubeconfig").read_text() == "apiVersion: v1\nkind: Config\nclusters: []\n"
    assert "Warning: Permanently added" in STDERR_NOISE
    summary = capsys.readouterr().out
    assert all(re.search(rf"{name}\s.*\sReady\s", summary) for name in ("master", "worker-linux", "worker-win")), summary


def test_a_failure_quotes_stderr_too(fake_vagrant):
    fake_vagrant.scenario({"fail": [{"pattern": "bash /tmp/k4w/cluster-init.sh", "times": 1, "exit": 2, "output": "init failed\n"}]})
    with pytest.raises(RemoteError) as err:
        fake_vagrant.up()
    assert "init failed" in err.value.tail and "Permanently added" in err.value.tail


def test_a_vm_deleted_in_hyperv_manager_stops_cluster_up_through_the_real_driver(fake_vagrant):
    """Vagrant keeps each VM's Id under VAGRANT_DOTFILE_PATH and forgets it in `vagrant status` once
    the VM is gone; cluster-up compares it with the Id it recorded and refuses to re-create the VM."""
    fake_vagrant.up()
    id_file = fake_vagrant.out / "vagrant-state" / "machines" / "worker-linux" / "hyperv" / "id"
    was = id_file.read_text()
    assert json.loads((fake_vagrant.out / "cluster-state.json").read_text())["vms"]["worker-linux"] == was
    machines_json = fake_vagrant.dir / "machines.json"
    machines_json.write_text(json.dumps({**json.loads(machines_json.read_text()), "worker-linux": "not_created"}))
    before = len(fake_vagrant.argvs())
    with pytest.raises(K4wError, match=rf"worker-linux: its Hyper-V VM k4w-worker-linux \(Id {was}\) no longer exists"):
        fake_vagrant.up()
    assert [c[0] for c in fake_vagrant.argvs()[before:]] == ["status"]
