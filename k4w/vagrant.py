"""Vagrant, driven one way by every stage that uses it: cluster-up/-down, cluster-test, test-box.

One Vagrant environment is a folder with a Vagrantfile plus the variables it reads. Each
command goes through a proc.Runner, so it is shown exactly as it runs (folder, variables,
arguments) and a dry run is this same driver with a dry-run runner: it prints the very
commands a real run would execute and runs none. The guest commands of cluster-up (ssh,
winrm, upload) run quietly through call(): their errors say what ran (k4w.cluster.remote).

A module of its own rather than part of k4w.cluster: test-box boots throwaway VMs that are no
part of the cluster, and the stages below k4w.cluster must not depend on it.
"""

from __future__ import annotations

import os
from pathlib import Path

from . import proc, tools

PROVIDER = "hyperv"


def parse_status(text: str) -> dict[str, str]:
    """{machine: state} from `vagrant status --machine-readable`: lines of
    timestamp,target,type,data (Vagrant's "Machine Readable Output" format)."""
    states = {}
    for line in text.splitlines():
        parts = line.split(",", 3)
        if len(parts) == 4 and parts[2] == "state" and parts[1]:
            states[parts[1]] = parts[3].strip()
    return states


class Vagrant:
    """The vagrant executable in one environment. env holds only what this environment adds to
    ours (it is shown in every printed command); runner decides about logging and dry runs."""

    def __init__(self, root: Path, env: dict | None = None, runner: proc.Runner | None = None, exe: str | None = None):
        self.root = Path(root)
        self.env = dict(env or {})
        self.runner = runner or proc.Runner()
        # A dry run must work on a machine without Vagrant: it shows the command by its name.
        self.exe = exe or ("vagrant" if self.runner.dry_run else tools.require("vagrant"))

    @property
    def dry_run(self) -> bool:
        return self.runner.dry_run

    def _run(self, *args: str, capture: bool = False, check: bool = True) -> tuple[int, str]:
        return self.runner.run([self.exe, *args], cwd=self.root, extra_env=self.env, capture=capture, check=check)

    def status(self, names: list[str] = ()) -> dict[str, str]:
        """{machine: state} ("running", "not_created", "off", ...); {} in a dry run."""
        _, text = self._run("status", "--machine-readable", *names, capture=True)
        return parse_status(text)

    def up(self, names: list[str] = ()) -> None:
        # Vagrant brings machines up in parallel only for providers that declare it; Hyper-V does
        # not (plugins/providers/hyperv/plugin.rb registers no parallel: true), so the machines
        # named come up one after another there.
        self._run("up", f"--provider={PROVIDER}", *names)

    def destroy(self, names: list[str] = (), check: bool = True) -> int:
        """Destroy the machines (all without names); returns Vagrant's exit code."""
        code, _ = self._run("destroy", "--force", *names, check=check)
        return code

    def ssh_config(self, names: list[str] = ()) -> str:
        return self._run("ssh-config", *names, capture=True)[1]

    def winrm_config(self, name: str | None = None) -> str:
        return self._run("winrm-config", *([name] if name else []), capture=True)[1]

    def box_add(self, catalogue: Path, check: bool = True) -> tuple[int, str]:
        """Add a box from a k4w box catalogue (OUT/boxes/<box>.json); Vagrant checks its sha256."""
        return self._run("box", "add", str(catalogue), check=check)

    def call(self, *args: str, timeout: float | None = None) -> proc.Result:
        """Run a command quietly (nothing shown or logged) and keep its output."""
        return proc.run([self.exe, *args], cwd=self.root, env={**os.environ, **self.env}, timeout=timeout)
