"""The cluster's machines as the Vagrantfile sees them (OUT/vagrant/cluster.json), and Vagrant.

cluster-up reads the rendered cluster.json (the same file the Vagrantfile reads), so the node
names, roles, OS and IPs it uses are exactly the Vagrant machines'.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from .. import sources
from ..errors import K4wError
from ..redact import redact

# Vagrant keeps machine state in .vagrant/. Not under OUT/vagrant: render swaps that folder
# atomically, which would make Vagrant forget its VMs.
DOTFILE_DIR = "vagrant-state"
PROVIDER = "hyperv"


@dataclass(frozen=True)
class Machine:
    name: str
    role: str
    os: str
    ip: str
    vmname: str

    @property
    def is_windows(self) -> bool:
        return self.os == "windows"

    @property
    def is_master(self) -> bool:
        return self.role == "master"


@dataclass(frozen=True)
class ClusterInfo:
    name: str
    prefix_length: int
    machines: tuple[Machine, ...]

    @property
    def master(self) -> Machine:
        return next(m for m in self.machines if m.is_master)

    @property
    def linux_workers(self) -> list[Machine]:
        return [m for m in self.machines if not m.is_master and not m.is_windows]

    @property
    def windows_workers(self) -> list[Machine]:
        return [m for m in self.machines if m.is_windows]


def load_cluster(out: Path) -> ClusterInfo:
    path = Path(out) / "vagrant" / "cluster.json"
    if not path.is_file():
        raise K4wError(f"{path} not found: run `invoke render` first")
    data = json.loads(path.read_text(encoding="utf-8"))
    machines = tuple(Machine(m["name"], m["role"], m["os"], m["ip"], m["vmname"]) for m in data["machines"])
    return ClusterInfo(data["cluster"], int(data["prefix_length"]), machines)


def vagrant_env(out: Path, base: dict | None = None) -> dict:
    env = dict(os.environ if base is None else base)
    env["K4W_CLUSTER_JSON"] = str(Path(out).resolve() / "vagrant" / "cluster.json")
    env["VAGRANT_DOTFILE_PATH"] = str(Path(out).resolve() / DOTFILE_DIR)
    env["VAGRANT_DEFAULT_PROVIDER"] = PROVIDER
    return env


class VagrantDriver(Protocol):
    def status(self) -> dict[str, str]: ...

    def up(self, names: list[str]) -> None: ...

    def destroy(self) -> None: ...


class PythonVagrant:
    """Vagrant through python-vagrant, in vagrant/ with the cluster's environment."""

    def __init__(self, out: Path, env: dict | None = None, root: Path | None = None):
        import vagrant

        self.root = root or sources.REPO.vagrant
        self.all_names = [m.name for m in load_cluster(out).machines]
        self.env = env or vagrant_env(out)
        # Output goes to the terminal: `vagrant up` of a Windows box takes minutes and shows progress.
        self.v = vagrant.Vagrant(root=str(self.root), env=self.env, quiet_stdout=False, quiet_stderr=False)

    def _guard(self, what: str, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except subprocess.CalledProcessError as exc:
            cmd = " ".join(str(c) for c in exc.cmd) if isinstance(exc.cmd, (list, tuple)) else str(exc.cmd)
            raise K4wError(redact(f"{what} failed with exit code {exc.returncode}: {cmd}")) from None
        except RuntimeError as exc:  # python-vagrant: vagrant executable not found
            raise K4wError(f"{what}: {exc}") from None

    def status(self) -> dict[str, str]:
        return {s.name: s.state for s in self._guard("vagrant status", self.v.status)}

    def up(self, names: list[str]) -> None:
        # Vagrant brings machines up in parallel only for providers that declare it; Hyper-V does
        # not (plugins/providers/hyperv/plugin.rb registers no parallel: true), so `vagrant up`
        # runs them one after another there and in parallel under libvirt.
        if sorted(names) == sorted(self.all_names):
            self._guard("vagrant up", self.v.up, provider=PROVIDER)
        else:
            for name in names:
                self._guard(f"vagrant up {name}", self.v.up, vm_name=name, provider=PROVIDER)

    def destroy(self) -> None:
        self._guard("vagrant destroy", self.v.destroy)
