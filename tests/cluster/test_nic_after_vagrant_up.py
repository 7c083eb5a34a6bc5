"""Vagrant's Hyper-V provider connects every adapter of a VM it starts to the management switch
(hashicorp/vagrant v2.3.4 plugins/providers/hyperv/scripts/utils/VagrantVM/VagrantVM.psm1,
Set-VagrantVMSwitch, run by its `up` and `reload`), so a VM k4w or its user just started has its
cluster NIC on the wrong switch. The class: over the recorded Vagrant, host and guest calls of every
path that starts VMs or works on VMs someone may have started, no guest step runs while a started
VM's cluster NIC has not been put back (host/cluster-nic.ps1 for that VM)."""

from __future__ import annotations

import re

import pytest

from k4w.cluster import up as up_mod
from tests.cluster.conftest import run_up

STARTS = re.compile(r"^vagrant (?:up|reload)\b(?P<names>.*)$")


def nic_before_guest_steps(log: list[str], machines: list[dict], moved: set[str] | None = None) -> list[str]:
    """Problems: a guest step while a machine started by `vagrant up`/`reload` (or moved before the run)
    has no cluster-nic.ps1 run since."""
    names = [m["name"] for m in machines]
    vmname = {m["name"]: m["vmname"] for m in machines}
    moved = set(moved or ())
    problems = []
    for line in log:
        start = STARTS.match(line)
        if start:
            moved |= set(start.group("names").split() or names)
        elif line.startswith("host: ") and "cluster-nic.ps1" in line:
            moved -= {n for n in names if f"-VMName '{vmname[n]}'" in line}
        elif line.split(":", 1)[0] in names and moved:
            problems.append(f"{line!r} ran while the cluster NIC of {sorted(moved)} was on the management switch")
    return problems


def _machines(world) -> list[dict]:
    return [{"name": m["name"], "vmname": m["vmname"]} for m in world.machines]


def test_a_first_cluster_up(world):
    run_up(world)
    assert any(line.startswith("vagrant up") for line in world.log)
    assert nic_before_guest_steps(world.log, _machines(world)) == []


@pytest.mark.parametrize("stopped", [["master", "worker-linux", "worker-win"], ["worker-win"]])
def test_a_finished_cluster_whose_vms_were_stopped(world, stopped):
    run_up(world)
    for name in stopped:
        world.states[name] = "off"
    world.log.clear()
    run_up(world)
    assert f"vagrant up {' '.join(stopped)}" in world.log
    assert nic_before_guest_steps(world.log, _machines(world)) == []


def test_a_cluster_up_resumed_after_a_failure_with_a_stopped_vm(world):
    world.scenario["fail"] = [{"pattern": "cluster-init", "times": 1}]
    with pytest.raises(Exception):
        run_up(world)
    world.scenario["fail"] = []
    world.states["worker-linux"] = "off"
    world.log.clear()
    run_up(world)
    assert "vagrant up worker-linux" in world.log
    assert nic_before_guest_steps(world.log, _machines(world)) == []


@pytest.mark.parametrize("by_hand", ["vagrant up", "vagrant reload"])
def test_cluster_reset_after_vms_were_started_by_hand(world, by_hand):
    """`vagrant reload` or a halt + `vagrant up` typed by hand between two k4w commands: the reset's
    guest steps must not run before every cluster NIC is back."""
    run_up(world)
    world.log.clear()
    world.log.append(by_hand)   # typed in the cluster's folder, outside k4w: every VM, every NIC moved
    up_mod.cluster_reset(world.cluster, world.out, vagrant=world.vagrant, remote=world.remote, host=world.host,
                         clock=world.clock)
    assert nic_before_guest_steps(world.log, _machines(world)) == []
    assert any("cluster-reset.ps1" in line for line in world.log)


def test_the_check_fails_when_a_guest_step_comes_first():
    machines = [{"name": "master", "vmname": "k4w-master"}]
    log = ["vagrant up master", "master: sudo true", "host: & 'cluster-nic.ps1' -VMName 'k4w-master'"]
    assert nic_before_guest_steps(log, machines) == [
        "'master: sudo true' ran while the cluster NIC of ['master'] was on the management switch"]
