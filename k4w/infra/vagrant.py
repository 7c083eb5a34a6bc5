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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from k4w.infra import proc, tools, ui
from k4w.infra.errors import K4wError

PROVIDER = "hyperv"   # the default provider (host.provider's default)
# Providers that boot several machines at once in one `vagrant up --parallel`: those whose plugin registers
# `parallel: true`. vagrant-libvirt does (vagrant-libvirt 0.11.2 (e0b17b34) lib/vagrant-libvirt/plugin.rb,
# `provider('libvirt', parallel: true, ...)`); Hyper-V does not (hashicorp/vagrant@v2.3.4 (986a0173)
# plugins/providers/hyperv/plugin.rb), so there every machine gets a process of its own (Vagrant.up).
PARALLEL_PROVIDERS = ("libvirt",)


def parse_boxes(text: str) -> set[tuple[str, str, str]]:
    """{(name, provider, version)} from `vagrant box list --machine-readable`: each box is a
    box-name line followed by its box-provider and box-version lines (plugins/commands/box/command/list.rb)."""
    boxes, current = set(), {}
    for line in text.splitlines():
        parts = line.split(",", 3)
        if len(parts) != 4 or not parts[2].startswith("box-"):
            continue
        key, value = parts[2], parts[3].strip()
        if key == "box-name":
            current = {"box-name": value}
        else:
            current[key] = value
        if {"box-name", "box-provider", "box-version"} <= current.keys():
            boxes.add((current["box-name"], current["box-provider"], current["box-version"]))
    return boxes


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

    def __init__(self, root: Path, env: dict | None = None, runner: proc.Runner | None = None, exe: str | None = None,
                 provider: str = PROVIDER):
        self.root = Path(root)
        self.provider = provider
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
        """Bring the machines up: one `vagrant up NAME` process per machine, all at once.

        Vagrant itself boots machines in parallel only for providers that declare it, and Hyper-V
        does not (plugins/providers/hyperv/plugin.rb registers no parallel: true): one
        `vagrant up a b c` boots them one after another. Separate processes are safe because
        Vagrant locks each machine on its own. They are NOT safe while a box is still to be added:
        two processes adding the same box collide on its download lock (box_add.rb,
        DownloadAlreadyInProgress), so the caller adds missing boxes first (box_add).
        A failed machine does not stop the others (stopping a Hyper-V import half-way leaves a
        VM Vagrant no longer knows); every failure is reported once all have finished.

        A provider that boots in parallel itself (PARALLEL_PROVIDERS: libvirt) gets one
        `vagrant up --parallel` of all the machines, which boots them at once in one process."""
        provider = f"--provider={self.provider}"
        if self.provider in PARALLEL_PROVIDERS:
            self._run("up", provider, *(["--parallel"] if len(names) > 1 else []), *names)
            return
        if len(names) <= 1:
            self._run("up", provider, *names)
            return
        if self.dry_run:
            ui.say(f"# these {len(names)} run at once, one process per machine:")
            for name in names:
                self._run("up", provider, name)
            return
        with ThreadPoolExecutor(max_workers=len(names), thread_name_prefix="vagrant-up") as pool:
            futures = {name: pool.submit(self._run, "up", provider, name) for name in names}
        failures = []
        for name, future in futures.items():
            try:
                future.result()
            except proc.Failed as exc:
                # Several machines printed at once above: quote this one's own last lines.
                failures.append(f"{name}: {proc.Failed(exc.result)}")
            except K4wError as exc:
                failures.append(f"{name}: {exc}")
        if failures:
            raise K4wError(f"vagrant up failed for {len(failures)} of {len(names)} machines "
                           f"(the others finished):\n" + "\n".join(failures))

    def boxes(self) -> set[tuple[str, str, str]]:
        """The installed boxes as (name, provider, version); empty in a dry run."""
        return parse_boxes(self._run("box", "list", "--machine-readable", capture=True)[1])

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

    def call(self, *args: str, timeout: float | None = None, input: str = "") -> proc.Result:
        """Run a command quietly (nothing shown or logged) and keep its output. input is its
        standard input: `vagrant ssh -c` hands it to the remote command (ssh inherits Vagrant's
        stdin, util/ssh.rb _raw_subprocess), and an empty one keeps it off the user's terminal."""
        return proc.run([self.exe, *args], cwd=self.root, env={**os.environ, **self.env}, timeout=timeout, input=input)
