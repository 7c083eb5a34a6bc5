"""One SSH connection per guest, shared by every command k4w runs there (OpenSSH's connection multiplexing).

Under QEMU's emulation (libvirt.accelerator tcg) every new connection is dear: `vagrant ssh -c` starts
Vagrant first (the sixth libvirt run: 27.8 s wall and 2.0 s of host CPU for one `kubectl get nodes`, where
a plain `ssh` with Vagrant's ssh-config took 0.14 s of host CPU), and each new SSH connection costs the
emulated guest a key exchange and a host-key signature. With ControlMaster the first command opens the
connection and the next ones are new sessions over it (ssh_config(5): ControlMaster, ControlPath,
ControlPersist).

Used on Linux hosts only (host.provider libvirt): multiplexing needs Unix-domain sockets, and the Hyper-V
path on Windows keeps one `vagrant ssh` per command, as before.

The sockets sit in a private folder (mkdtemp: mode 0700) because whoever can open one runs commands as the
guest's user without a key. The folder is short-lived (/tmp: a socket path must fit sun_path, 108 bytes
on Linux), and close() ends every master and removes it when the k4w process exits.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

from k4w.infra import proc, tools

# Seconds an idle master stays after its last session (ssh_config(5) ControlPersist): long enough to carry
# one wait's polls from one to the next, short enough that a killed k4w leaves no ssh behind for long.
PERSIST_SECONDS = 60
# How long `ssh -O exit` may take to end one master (it only talks to the local socket).
EXIT_TIMEOUT_S = 10


class Mux:
    """The sockets of one k4w process. options() are ssh's command-line options; config_block() the same
    as an ssh_config block, for tools that take a config file (testinfra's --ssh-config)."""

    def __init__(self):
        self._folder: Path | None = None

    @property
    def folder(self) -> Path:
        if self._folder is None:
            self._folder = Path(tempfile.mkdtemp(prefix="k4w-ssh-"))
            atexit.register(self.close)
        return self._folder

    def _path(self) -> str:
        # %C: a hash of the local host, remote host, port and user (ssh_config(5) TOKENS), one socket per guest.
        return str(self.folder / "%C")

    def _settings(self) -> tuple[tuple[str, str], ...]:
        return (("ControlMaster", "auto"), ("ControlPath", self._path()), ("ControlPersist", str(PERSIST_SECONDS)))

    def options(self) -> list[str]:
        return [word for key, value in self._settings() for word in ("-o", f"{key}={value}")]

    def config_block(self) -> str:
        """The same settings as a `Host *` block for the end of an ssh_config: options are first-match-wins,
        so it adds them to every host above it without changing one they set."""
        return "Host *\n" + "".join(f"  {key} {value}\n" for key, value in self._settings())

    def ssh(self, config: Path, host: str) -> list[str]:
        """The argv prefix of a command on host through its shared connection (config: an ssh_config naming host)."""
        return [tools.require("ssh"), "-F", str(config), *self.options(), host]

    def close(self) -> None:
        """End every master whose socket is in the folder (k4w's own, or a tool's that read config_block) and
        remove the folder. `-O exit` talks to the socket alone: the host name is never resolved."""
        if self._folder is None:
            return
        for socket in self._folder.iterdir():
            if socket.is_socket():
                try:
                    proc.run([tools.require("ssh"), "-F", os.devnull, "-o", f"ControlPath={socket}", "-O", "exit", "k4w"],
                             timeout=EXIT_TIMEOUT_S)
                except proc.TimedOut:
                    pass   # its socket goes with the folder below; an idle master then exits at ControlPersist
        shutil.rmtree(self._folder, ignore_errors=True)
        self._folder = None
