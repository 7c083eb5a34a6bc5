"""The cluster's machines as the Vagrantfile sees them (OUT/vagrant/cluster.json), and its Vagrant.

cluster-up reads the rendered cluster.json (the same file the Vagrantfile reads), so the node
names, roles, OS and IPs it uses are exactly the Vagrant machines'.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from k4w.derive.cluster_nic import cluster_nic_mac, mac_with  # noqa: F401 (cluster-up and ci/e2e read them here)
from k4w.infra import documents, sources
from k4w.outdir import state as out_state
from k4w.infra import proc
from k4w.infra.errors import K4wError
from k4w.infra.vagrant import PROVIDER, Vagrant  # noqa: F401 (PROVIDER: the default, Hyper-V)

# Vagrant keeps machine state in .vagrant/. Not under OUT/vagrant: render swaps that folder
# atomically, which would make Vagrant forget its VMs.
DOTFILE_DIR = "vagrant-state"


@dataclass(frozen=True)
class Machine:
    name: str
    role: str
    os: str
    ip: str
    vmname: str
    box: str = ""
    box_catalogue: str = ""    # OUT/boxes/<box>.json, written when the box is built

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
    # host.provider as render wrote it: cluster.json names it only for libvirt (a Hyper-V cluster.json is
    # what it was before there was a choice), so its absence means hyperv.
    provider: str = PROVIDER
    # cluster.json's "libvirt" object (k4w.render.templates.libvirt_cluster_json); empty on Hyper-V.
    libvirt: dict = field(default_factory=dict)

    @property
    def on_libvirt(self) -> bool:
        return self.provider == "libvirt"

    @property
    def master(self) -> Machine:
        return next(m for m in self.machines if m.is_master)

    @property
    def linux_workers(self) -> list[Machine]:
        return [m for m in self.machines if not m.is_master and not m.is_windows]

    @property
    def windows_workers(self) -> list[Machine]:
        return [m for m in self.machines if m.is_windows]

    def cluster_mac(self, machine: Machine) -> str:
        return cluster_nic_mac(self.name, machine.name)


def load_cluster(out: Path) -> ClusterInfo:
    path = Path(out) / "vagrant" / "cluster.json"
    if not path.is_file():
        raise K4wError(f"{path} not found: run `invoke render` first")
    source = f"{path} (run `invoke render` to write it again)"
    data = documents.json_value(path.read_text(encoding="utf-8"), source)
    documents.parse(out_state.ClusterJson, data, source)
    machines = tuple(Machine(m["name"], m["role"], m["os"], m["ip"], m["vmname"], m["box"], m["box_catalogue"])
                     for m in data["machines"])
    return ClusterInfo(data["cluster"], int(data["prefix_length"]), machines, data.get("provider") or PROVIDER,
                       dict(data.get("libvirt") or {}))


def vm_id(out: Path, name: str, provider: str = PROVIDER) -> str | None:
    """The VM id Vagrant records for a machine, or None when it records none: the Hyper-V VM GUID, or
    the libvirt domain's UUID (vagrant-libvirt 0.11.2 (e0b17b34) lib/vagrant-libvirt/action/create_domain.rb
    sets `env[:machine].id = server.id`, the domain UUID).

    Vagrant keeps a machine's provider id in <dotfile>/machines/<name>/<provider>/id
    (hashicorp/vagrant@v2.3.4 (986a0173) lib/vagrant/environment.rb `machine`, lib/vagrant/machine.rb `id=`);
    the Hyper-V provider's id is the VM's Id (plugins/providers/hyperv/action/import.rb), and its
    read_state forgets it (deletes the file) once `Get-VM -Id` finds no such VM (action/read_state.rb,
    scripts/get_vm_status.ps1): after any `vagrant status`, a destroyed VM has no id here."""
    path = Path(out) / DOTFILE_DIR / "machines" / name / provider / "id"
    try:
        return path.read_text(encoding="utf-8").strip() or None
    except FileNotFoundError:
        return None


def vagrant_env(out: Path, provider: str = PROVIDER) -> dict:
    """The variables the cluster's Vagrantfile reads (added to ours)."""
    return {
        "K4W_CLUSTER_JSON": str(Path(out).resolve() / "vagrant" / "cluster.json"),
        "VAGRANT_DOTFILE_PATH": str(Path(out).resolve() / DOTFILE_DIR),
        "VAGRANT_DEFAULT_PROVIDER": provider,
    }


def cluster_vagrant(out: Path, runner: proc.Runner) -> Vagrant:
    """Vagrant in vagrant/ with the cluster's environment (shown in every printed command), for the
    provider OUT/vagrant/cluster.json names."""
    provider = load_cluster(out).provider
    return Vagrant(sources.REPO.vagrant, vagrant_env(out, provider), runner, provider=provider)


class VagrantDriver(Protocol):
    """What cluster-up needs from Vagrant (k4w.infra.vagrant.Vagrant; tests pass a fake)."""

    def status(self) -> dict[str, str]: ...

    def up(self, names: list[str]) -> None: ...

    def boxes(self) -> set[tuple[str, str, str]]: ...

    def box_add(self, catalogue: Path, check: bool = True) -> tuple[int, str]: ...

    def destroy(self) -> int: ...
