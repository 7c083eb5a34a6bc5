"""A real OpenSSH server on 127.0.0.1 for the tests of k4w's ssh paths (k4w.infra.ssh_mux, VagrantRemote on
libvirt): throwaway host and user keys, this user's own account, stopped by PID at the end.

`config(alias)` is the ssh_config Vagrant's `vagrant ssh-config` prints for a machine, pointed at it."""

from __future__ import annotations

import contextlib
import getpass
import os
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.helpers import running_daemon, system_tool

START_TIMEOUT_S = 20


@dataclass
class Sshd:
    port: int
    key: Path
    folder: Path

    def config(self, alias: str) -> str:
        # Vagrant's own ssh-config settings (hashicorp/vagrant v2.3.4 plugins/commands/ssh_config/command.rb template).
        return (f"Host {alias}\n  HostName 127.0.0.1\n  User {getpass.getuser()}\n  Port {self.port}\n"
                f"  UserKnownHostsFile /dev/null\n  StrictHostKeyChecking no\n  PasswordAuthentication no\n"
                f"  IdentityFile {self.key}\n  IdentitiesOnly yes\n  LogLevel FATAL\n")

    def accepted(self) -> int:
        """How many connections the server accepted (its log's "Accepted publickey" lines)."""
        return (self.folder / "sshd.log").read_text().count("Accepted publickey")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_sshd(folder: Path):
    sshd = system_tool("sshd")
    keygen = system_tool("ssh-keygen")
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("host", "user"):
        subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-f", str(folder / name)], check=True)
    (folder / "authorized_keys").write_text((folder / "user.pub").read_text())
    port = _free_port()
    (folder / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {folder / 'host'}\nAuthorizedKeysFile {folder / 'authorized_keys'}\n"
        f"PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
        f"PidFile {folder / 'sshd.pid'}\nLogLevel VERBOSE\n")
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(exist_ok=True)   # privilege separation's folder, which root's sshd requires

    def answers() -> bool:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
        return False

    with running_daemon([sshd, "-D", "-e", "-f", folder / "sshd_config"], answers=answers, timeout=START_TIMEOUT_S,
                        log=folder / "sshd.log", what="sshd"):
        yield Sshd(port, folder / "user", folder)
