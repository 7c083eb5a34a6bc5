"""One ssh connection per guest (k4w.infra.ssh_mux), against a real sshd on 127.0.0.1 (tests/sshd.py).

Under TCG each new connection and each `vagrant ssh` cost seconds the emulated master does not have (the
sixth libvirt run); these hold the commands of one k4w process to one connection per guest, and hold
close() to leaving no ssh and no socket behind."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from k4w.cluster.machines import Machine
from k4w.cluster.remote import RemoteError, VagrantRemote
from k4w.infra import proc
from k4w.infra.ssh_mux import Mux
from tests.sshd import running_sshd


@pytest.fixture
def sshd(tmp_path):
    with running_sshd(tmp_path / "sshd") as server:
        yield server


def _masters(folder: Path) -> list[str]:
    """ssh processes whose command line names the socket folder (a master left running)."""
    found = subprocess.run(["pgrep", "-af", str(folder)], capture_output=True, text=True).stdout
    return [line for line in found.splitlines() if " ssh " in f" {line} " or "/ssh " in line]


def test_commands_to_one_guest_share_one_connection_and_close_leaves_nothing(sshd, tmp_path):
    config = tmp_path / "ssh-config"
    config.write_text(sshd.config("master"))
    mux = Mux()
    folder = mux.folder
    assert folder.stat().st_mode & 0o077 == 0, "the sockets' folder must be the user's alone"
    answers = [proc.run([*mux.ssh(config, "master"), "-T", "echo $SSH_CONNECTION; exit 3"], timeout=30, input="")
               for _ in range(3)]
    assert [a.returncode for a in answers] == [3, 3, 3]
    assert len({a.stdout for a in answers}) == 1, "each command came over a connection of its own (another client port)"
    assert sshd.accepted() == 1
    assert proc.run([*mux.ssh(config, "master"), "-T", "cat"], timeout=30, input="from stdin\n").stdout == "from stdin\n"
    mux.close()
    assert not folder.exists()
    assert _masters(folder) == []


def test_a_tool_reading_the_config_block_shares_the_connection_too(sshd, tmp_path):
    """cluster-test's testinfra runs `ssh -F FILE -o ControlMaster=auto -o ControlPersist=60s HOST CMD` per check
    (pytest-testinfra's ssh backend); the block at the end of FILE gives those a socket, so they share one."""
    mux = Mux()
    config = tmp_path / "ssh-config"
    config.write_text(sshd.config("master") + "\n" + mux.config_block())
    for _ in range(3):
        done = subprocess.run(["ssh", "-F", str(config), "-o", "ControlMaster=auto", "-o", "ControlPersist=60s", "master", "true"],
                              capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, done.stderr
    assert sshd.accepted() == 1
    folder = mux.folder
    mux.close()
    assert not folder.exists() and _masters(folder) == []


class _Vagrant:
    """What VagrantRemote asks Vagrant on a libvirt cluster: only `vagrant ssh-config NAME`."""

    def __init__(self, sshd):
        self.sshd, self.calls = sshd, []

    def call(self, *argv, timeout=None, input=""):
        self.calls.append(argv)
        assert argv[0] == "ssh-config", f"VagrantRemote ran `vagrant {shlex.join(argv)}` for a Linux guest's command"
        return proc.Result(["vagrant", *argv], 0, self.sshd.config(argv[1]), "")


def test_a_libvirt_clusters_linux_commands_run_as_vagrant_ssh_runs_them_over_one_connection(sshd):
    vagrant = _Vagrant(sshd)
    remote = VagrantRemote(vagrant, timeout=30, mux=Mux())
    master = Machine(name="master", role="master", os="linux", ip="192.168.251.10", vmname="k4w-master")
    # `vagrant ssh -c` runs the command in a login shell (config.ssh.shell "bash -l"), which reads the profile
    # that puts kubectl's folder on PATH on some boxes
    assert remote.run(master, "shopt -q login_shell && echo login; echo \"$1\" 'quoted $HOME'") == "login\n quoted $HOME\n"
    assert remote.run(master, "cat", stdin="a secret\n") == "a secret\n"
    with pytest.raises(RemoteError) as failed:
        remote.run(master, "echo to-stderr >&2; exit 7")
    assert failed.value.code == 7 and "to-stderr" in str(failed.value)
    assert vagrant.calls == [("ssh-config", "master")]
    assert sshd.accepted() == 1
    remote.mux.close()
