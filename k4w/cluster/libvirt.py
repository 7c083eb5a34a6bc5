"""cluster-up's host side on a libvirt host (host.provider libvirt): the two networks every VM has a NIC on.

On Hyper-V, cluster-up checks the cluster switch and hot-adds each VM's cluster NIC from the host
(k4w.cluster.network, host/cluster-nic.ps1). On libvirt both NICs are in the domain definition from its
creation (vagrant/Vagrantfile: the management network and a private_network with the node's static MAC),
so the host side is only this check that both networks exist and are active before `vagrant up`; the node's
static IP is set in the guest as on Hyper-V (steps.step_cluster_ip). `invoke network-up` defines the networks.
"""

from __future__ import annotations

import re
from typing import Callable

from k4w.infra import proc, tools

# What runs a virsh command line on this host: (exit code, output). cluster-up takes it as a dependency
# (tests pass a fake; a dry run shows the command).
Virsh = Callable[[list[str]], tuple[int, str]]

# `virsh net-info NAME` prints "Active:         yes" or "no" (measured with libvirt 9.0 on Debian 12), and
# exits 1 with "Network not found" when there is no such network.
_ACTIVE = re.compile(r"^Active:\s*(\S+)", re.MULTILINE)


def net_info_argv(uri: str, network: str) -> list[str]:
    return ["virsh", "-c", uri, "net-info", network]


def run_virsh(argv: list[str]) -> tuple[int, str]:
    """Run virsh (read-only queries only) and keep its output."""
    result = proc.run([tools.require("virsh"), *argv[1:]], timeout=60)
    return result.returncode, result.output.strip()


def show_virsh(argv: list[str]) -> tuple[int, str]:
    """run_virsh in a dry run: the exact command, nothing run."""
    proc.show(argv)
    return 0, ""


def network_problems(libvirt: dict, virsh: Virsh, dry_run: bool = False) -> list[str]:
    """What keeps the VMs from getting their two NICs: a network that is missing or inactive. libvirt is
    cluster.json's "libvirt" object (k4w.render.templates.libvirt_cluster_json)."""
    problems = []
    for role, key in (("management", "management_network"), ("cluster", "cluster_network")):
        name = libvirt[key]
        code, output = virsh(net_info_argv(libvirt["uri"], name))
        if dry_run:
            continue
        if code != 0:
            problems.append(f"the {role} network '{name}' does not exist on {libvirt['uri']} "
                            f"(virsh net-info: {output.strip().splitlines()[-1] if output.strip() else f'exit {code}'})")
            continue
        active = _ACTIVE.search(output)
        if not active or active.group(1) != "yes":
            problems.append(f"the {role} network '{name}' exists on {libvirt['uri']} but is not active")
    return problems


def nics_plan(cfg) -> str:
    """Where the plan's `vagrant up` line says each VM's two NICs are."""
    lv = cfg.libvirt
    return (f"management NIC on libvirt network '{lv.management_network}', cluster NIC on '{lv.cluster_network}' "
            "with its static MAC, both in the domain from creation; all machines at once (--parallel)")
