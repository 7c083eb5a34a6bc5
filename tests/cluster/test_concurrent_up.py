"""cluster-up boots the VMs at once: one `vagrant up NAME` per VM through the real driver
(k4w.infra.vagrant), with the fake `vagrant` executable (tests/fakes/vagrant.py) first on PATH. The fake
sleeps each machine's boot time and logs when it started and ended, so the test measures wall time
and the largest number of VMs booting at the same moment."""

from __future__ import annotations

import json
import re
import time

import pytest

from k4w.infra import proc
from k4w.cluster import machines as machines_mod, steps as S, up as up_mod
from k4w.infra.errors import K4wError
from tests.cluster.conftest import render_to, write_box_catalogues
from tests.fakes.cluster_world import FakeClock
from tests.fakes.vagrant import VagrantOnPath
from tests.helpers import config_dict

# Boot seconds per VM: Windows is the slowest, as on Hyper-V (docs/hyperv-host.md "First cluster on Hyper-V").
BOOT = {"master": 1.0, "worker-a": 1.5, "worker-b": 2.0, "worker-c": 1.0, "worker-win": 3.0}
SLOWEST, TOTAL = max(BOOT.values()), sum(BOOT.values())
# Python start-up of the fake, five processes on a loaded CI box: generous, still far below TOTAL.
MARGIN = 2.0


def _five_nodes() -> dict:
    nodes = [{"name": "master", "role": "master", "box": "ubuntu-1604", "ip": "192.168.250.10", "cpus": 2, "memory": 2048}]
    nodes += [{"name": name, "role": "worker", "box": "ubuntu-1604", "ip": f"192.168.250.{11 + i}", "cpus": 2, "memory": 2048}
              for i, name in enumerate(["worker-a", "worker-b", "worker-c"])]
    nodes += [{"name": "worker-win", "role": "worker", "box": "windows-1803", "ip": "192.168.250.21", "cpus": 2, "memory": 4096}]
    data = config_dict()
    data["nodes"] = nodes
    return data


@pytest.fixture
def five(tmp_path, monkeypatch):
    out = tmp_path / "build"
    cluster = render_to(out, _five_nodes())
    fake = VagrantOnPath(tmp_path, monkeypatch)
    fake.scenario({"boot_seconds": BOOT})
    return cluster, out, fake


def _max_concurrency(spans) -> int:
    events = sorted([(start, 1) for start, _ in spans.values()] + [(end, -1) for _, end in spans.values()])
    running = peak = 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    return peak


def test_five_vms_boot_at_once_in_about_the_slowest_vms_time(five, capsys):
    cluster, out, fake = five
    vagrant = machines_mod.cluster_vagrant(out, proc.Runner())
    started = time.monotonic()
    vagrant.up(list(BOOT))
    wall = time.monotonic() - started
    spans = fake.spans()
    peak = _max_concurrency(spans)
    ups = [argv for argv in fake.argvs() if argv[0] == "up"]
    with capsys.disabled():
        print(f"\n[concurrent vagrant up] 5 VMs, boot seconds {BOOT}: wall {wall:.2f} s "
              f"(slowest VM {SLOWEST:.1f} s, one after another {TOTAL:.1f} s), max concurrency {peak}")
    assert sorted(ups) == sorted(["up", "--provider=hyperv", name] for name in BOOT)   # one process per VM
    assert peak > 1 and peak == len(BOOT)
    assert SLOWEST <= wall < SLOWEST + MARGIN < TOTAL
    assert vagrant.status() == {name: "running" for name in BOOT}


def test_one_failed_vm_is_reported_by_name_after_the_others_finished(five):
    cluster, out, fake = five
    fake.scenario({"boot_seconds": BOOT, "fail": [{"pattern": "^up --provider=hyperv worker-b$", "exit": 1,
                                                   "output": "Hyper-V import failed"}]})
    vagrant = machines_mod.cluster_vagrant(out, proc.Runner())
    with pytest.raises(K4wError) as err:
        vagrant.up(list(BOOT))
    message = str(err.value)
    assert message.startswith("vagrant up failed for 1 of 5 machines")
    assert re.search(r"\nworker-b: \S*vagrant up --provider=hyperv worker-b exited 1:\nHyper-V import failed", message)
    states = vagrant.status()
    assert states.pop("worker-b") == "not_created" and set(states.values()) == {"running"}


def test_concurrent_ups_that_add_the_same_box_collide_without_the_box_step(five):
    """Why cluster-up adds boxes first: two Vagrant processes adding one box fail on its download lock."""
    cluster, out, fake = five
    write_box_catalogues(out)
    fake.scenario({"boot_seconds": BOOT, "box_add_seconds": 1.0})
    with pytest.raises(K4wError, match="DownloadAlreadyInProgress"):
        machines_mod.cluster_vagrant(out, proc.Runner()).up(list(BOOT))


def test_cluster_up_adds_each_missing_box_once_then_boots_every_vm_at_once(five):
    cluster, out, fake = five
    write_box_catalogues(out)
    fake.scenario({"boot_seconds": BOOT, "box_add_seconds": 1.0})
    ctx = up_mod.make_context(cluster, out, dry_run=False, host=lambda s: (0, ""), clock=FakeClock())
    S.step_up(ctx)
    argvs = [a for a in fake.argvs() if a[0] in ("box", "up")]
    adds = [a for a in argvs if a[:2] == ["box", "add"]]
    assert sorted(a[2] for a in adds) == sorted(str(out / "boxes" / f"{b}.json") for b in ("ubuntu-1604", "windows-1803"))
    first_up = next(i for i, a in enumerate(argvs) if a[0] == "up")
    assert all(argvs.index(a) < first_up for a in adds)
    assert _max_concurrency(fake.spans()) == len(BOOT)
    # A second run finds the boxes installed and the VMs running: no box is added again.
    before = len(fake.argvs())
    S.step_up(ctx)
    assert not [a for a in fake.argvs()[before:] if a[:2] == ["box", "add"] or a[0] == "up"]


def test_a_box_that_was_never_built_stops_cluster_up_before_any_vm_boots(five):
    cluster, out, fake = five
    ctx = up_mod.make_context(cluster, out, dry_run=False, host=lambda s: (0, ""), clock=FakeClock())
    with pytest.raises(K4wError, match=r"box ubuntu-1604 is not built: .*boxes/ubuntu-1604.json does not exist.*"
                                       r"Run `invoke build-ubuntu` first"):
        S.step_up(ctx)
    assert not [a for a in fake.argvs() if a[0] == "up"]
