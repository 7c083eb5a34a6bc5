"""The cluster's machines as the Vagrantfile sees them (OUT/vagrant/cluster.json), and its Vagrant.

cluster-up reads the rendered cluster.json (the same file the Vagrantfile reads), so the node
names, roles, OS and IPs it uses are exactly the Vagrant machines'.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from k4w.infra import documents, sources
from k4w.outdir import state as out_state
from k4w.infra import proc
from k4w.infra.errors import K4wError
from k4w.infra.vagrant import PROVIDER, Vagrant

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
    return ClusterInfo(data["cluster"], int(data["prefix_length"]), machines)


# The first octet of every cluster NIC's MAC: 0x02 sets the IEEE 802 "locally administered" bit (b1)
# and leaves the group bit (b0) clear, so it is a unicast address no vendor OUI (Hyper-V's dynamic pool
# is Microsoft's 00-15-5D) can ever hand out.
LOCALLY_ADMINISTERED_UNICAST = 0x02


def cluster_nic_mac(cluster: str, node: str) -> str:
    """The static MAC k4w gives a node's cluster NIC, as Hyper-V writes it (12 hex digits, no
    separators: Get-VMNetworkAdapter's MacAddress, which Vagrant splits into pairs in
    hashicorp/vagrant@v2.3.4 (986a0173) plugins/providers/hyperv/scripts/get_network_config.ps1).
    Derived from the cluster and node names, so it is the same on every run and the guest can find
    its cluster NIC by it before the NIC has an address."""
    digest = hashlib.sha256(f"{cluster}\0{node}".encode()).digest()
    return bytes([LOCALLY_ADMINISTERED_UNICAST, *digest[:5]]).hex().upper()


def mac_with(mac: str, separator: str) -> str:
    """'02AB..' as '02:ab:..' (Linux sysfs, netplan: separator ':') or '02-AB-..' (Windows Get-NetAdapter: '-')."""
    pairs = [mac[i:i + 2] for i in range(0, 12, 2)]
    return ":".join(pairs).lower() if separator == ":" else separator.join(pairs).upper()


def vm_id(out: Path, name: str) -> str | None:
    """The Hyper-V VM GUID Vagrant records for a machine, or None when it records none.

    Vagrant keeps a machine's provider id in <dotfile>/machines/<name>/<provider>/id
    (hashicorp/vagrant@v2.3.4 (986a0173) lib/vagrant/environment.rb `machine`, lib/vagrant/machine.rb `id=`);
    the Hyper-V provider's id is the VM's Id (plugins/providers/hyperv/action/import.rb), and its
    read_state forgets it (deletes the file) once `Get-VM -Id` finds no such VM (action/read_state.rb,
    scripts/get_vm_status.ps1): after any `vagrant status`, a destroyed VM has no id here."""
    path = Path(out) / DOTFILE_DIR / "machines" / name / PROVIDER / "id"
    try:
        return path.read_text(encoding="utf-8").strip() or None
    except FileNotFoundError:
        return None


def vagrant_env(out: Path) -> dict:
    """The variables the cluster's Vagrantfile reads (added to ours)."""
    return {
        "K4W_CLUSTER_JSON": str(Path(out).resolve() / "vagrant" / "cluster.json"),
        "VAGRANT_DOTFILE_PATH": str(Path(out).resolve() / DOTFILE_DIR),
        "VAGRANT_DEFAULT_PROVIDER": PROVIDER,
    }


def cluster_vagrant(out: Path, runner: proc.Runner) -> Vagrant:
    """Vagrant in vagrant/ with the cluster's environment (shown in every printed command)."""
    return Vagrant(sources.REPO.vagrant, vagrant_env(out), runner)


class VagrantDriver(Protocol):
    """What cluster-up needs from Vagrant (k4w.infra.vagrant.Vagrant; tests pass a fake)."""

    def status(self) -> dict[str, str]: ...

    def up(self, names: list[str]) -> None: ...

    def boxes(self) -> set[tuple[str, str, str]]: ...

    def box_add(self, catalogue: Path, check: bool = True) -> tuple[int, str]: ...

    def destroy(self) -> int: ...
