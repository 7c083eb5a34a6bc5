"""Remote commands on the cluster VMs, behind one small interface a fake can replace.

RemoteExec.run(machine, command) runs a shell command (bash on Linux through `vagrant ssh -c`,
PowerShell on Windows through `vagrant winrm -e -c`) and returns its standard output only, or
raises RemoteError naming the node, the command (credentials redacted), the exit code and the
last 20 lines of output (stdout and stderr). Only stdout is ever parsed: Vagrant prints its own
notices on stderr ("A new version of Vagrant is available", plugin warnings), and so do sudo,
ssh ("Warning: Permanently added ...") and kubectl; mixed into a kubeconfig or a JSON answer
they would corrupt it. RemoteExec.upload copies a file or folder to the guest (`vagrant upload`).

On a Linux host (host.provider libvirt) a Linux guest's commands go through plain `ssh` with Vagrant's own
ssh-config, over one shared connection per guest (k4w.infra.ssh_mux), instead of a `vagrant ssh` each: the
same user, key and login shell, without Vagrant's start per command.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from k4w.infra import proc, ui
from k4w.infra.errors import K4wError
from k4w.infra.redact import redact
from k4w.infra.ssh_mux import Mux
from k4w.outdir import private
from k4w.infra.vagrant import Vagrant
from .machines import Machine, cluster_vagrant, load_cluster

TAIL_LINES = proc.TAIL_LINES
# `vagrant winrm` exits 1 for any failure; the wrapper prints the real exit code on this marker.
EXIT_MARKER = "k4w-exit-code:"
_EXIT_LINE = re.compile(rf"^{re.escape(EXIT_MARKER)}(-?\d+)\s*$", re.M)


class RemoteError(K4wError):
    def __init__(self, node: str, command: str, code: int, output: str):
        self.node, self.code = node, code
        self.command = redact(command)
        self.tail = proc.tail(output, TAIL_LINES)
        super().__init__(
            f"{node}: command failed with exit code {code}:\n  $ {self.command}\n"
            f"last {TAIL_LINES} lines of output:\n{self.tail or '  (no output)'}"
        )


class RemoteExec(Protocol):
    def run(self, machine: Machine, command: str, stdin: str = "") -> str: ...

    def upload(self, machine: Machine, source: Path, destination: str) -> None: ...


def powershell_wrapper(command: str) -> str:
    """Run command and print its exit code (native programs' $LASTEXITCODE, or 1 if it threw)."""
    return (
        "$global:LASTEXITCODE = 0; "
        f"try {{ {command} }} catch {{ Write-Output $_; Write-Output '{EXIT_MARKER}1'; exit 1 }}; "
        f"Write-Output ('{EXIT_MARKER}' + $LASTEXITCODE); exit $LASTEXITCODE"
    )


@dataclass
class VagrantRemote:
    """The real thing: `vagrant ssh`, `winrm` and `upload` in the cluster's Vagrant environment."""

    vagrant: Vagrant
    timeout: float = 3600
    # Linux guests' commands over shared ssh connections (a Linux host); None: one `vagrant ssh` each.
    mux: Mux | None = None
    _ssh_configs: dict[str, Path] = field(default_factory=dict)

    def _call(self, argv: list[str], stdin: str = "") -> tuple[int, str, str]:
        """(exit code, stdout, stderr) of one vagrant command."""
        return self._exec(lambda: self.vagrant.call(*argv, timeout=self.timeout, input=stdin))

    def _exec(self, start) -> tuple[int, str, str]:
        try:
            result = start()
        except proc.TimedOut as exc:
            return 124, "", f"timed out after {self.timeout:.0f} s\n{exc.output}"
        return result.returncode, result.stdout or "", result.stderr or ""

    def _ssh_config(self, machine: Machine) -> Path:
        """Vagrant's ssh-config of the machine, asked once per process (a running machine keeps its address
        and key) and kept in the mux's private folder."""
        if machine.name not in self._ssh_configs:
            code, stdout, stderr = self._call(["ssh-config", machine.name])
            if code != 0:
                raise RemoteError(machine.name, f"vagrant ssh-config {machine.name}", code, stdout + stderr)
            path = self.mux.folder / f"{machine.name}.ssh-config"
            private.write_private(path, stdout)
            self._ssh_configs[machine.name] = path
        return self._ssh_configs[machine.name]

    def _ssh(self, machine: Machine, command: str, stdin: str) -> tuple[int, str, str]:
        if self.mux is None:
            return self._call(["ssh", machine.name, "--no-tty", "--command", command], stdin)
        # As `vagrant ssh -c` runs it: in the login shell config.ssh.shell names, "bash -l" by default
        # (hashicorp/vagrant v2.3.4 (986a0173) lib/vagrant/action/builtin/ssh_run.rb; plugins/kernel_v2/config/ssh.rb).
        argv = [*self.mux.ssh(self._ssh_config(machine), machine.name), "-T", f"bash -l -c {shlex.quote(command)}"]
        return self._exec(lambda: proc.run(argv, timeout=self.timeout, input=stdin))

    def run(self, machine: Machine, command: str, stdin: str = "") -> str:
        """stdin reaches a Linux command's standard input (for secrets: never on a command line,
        which sudo logs to auth.log); `vagrant winrm` has no such channel, so Windows takes none."""
        if machine.is_windows:
            if stdin:
                raise ValueError("vagrant winrm cannot pass standard input; upload a file instead")
            code, stdout, stderr = self._call(["winrm", machine.name, "--elevated", "--command", powershell_wrapper(command)])
            # The wrapper writes its marker with Write-Output: on stdout, where vagrant winrm puts the
            # remote success stream, and the remote
            # error stream on stderr (hashicorp/vagrant@v2.3.4 (986a0173) plugins/commands/winrm/command.rb, execute).
            found = _EXIT_LINE.findall(stdout)
            if found:
                code = int(found[-1])
                stdout = _EXIT_LINE.sub("", stdout).rstrip() + "\n"
        else:
            code, stdout, stderr = self._ssh(machine, command, stdin)
        if code != 0:
            raise RemoteError(machine.name, command, code, stdout + stderr)
        return stdout

    def upload(self, machine: Machine, source: Path, destination: str) -> None:
        argv = ["upload", str(source), destination, machine.name]
        code, stdout, stderr = self._call(argv)
        if code != 0:
            raise RemoteError(machine.name, shlex.join(argv), code, stdout + stderr)


def cluster_remote(out: Path, timeout: float = 3600) -> VagrantRemote:
    """The cluster's remote: its Vagrant environment, and on a libvirt cluster (a Linux host) shared ssh
    connections to its Linux guests."""
    vagrant = cluster_vagrant(out, proc.Runner())
    return VagrantRemote(vagrant, timeout=timeout, mux=Mux() if load_cluster(out).on_libvirt else None)


class DryRunRemote:
    """Prints each command instead of running it; answers with what a healthy cluster would say."""

    def __init__(self, answers: dict[str, str] | None = None):
        self.answers = answers or {}
        self.commands: list[tuple[str, str]] = []

    def run(self, machine: Machine, command: str, stdin: str = "") -> str:
        self.commands.append((machine.name, command))
        ui.say(f"[{machine.name}] $ {command}" + ("   (secret on its standard input)" if stdin else ""), style="cyan")
        for pattern, answer in self.answers.items():
            if re.search(pattern, command):
                return answer
        return ""

    def upload(self, machine: Machine, source: Path, destination: str) -> None:
        self.commands.append((machine.name, f"upload {source} {destination}"))
        ui.say(f"[{machine.name}] upload {source} -> {destination}", style="cyan")


def sh_env(**values: str) -> str:
    """`env K=V ...` for a bash command line, every value quoted."""
    return "env " + " ".join(f"{k}={shlex.quote(str(v))}" for k, v in values.items())
