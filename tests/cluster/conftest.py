"""Fixtures for the cluster tests: rendered artifacts in a temp dir, fakes at the process boundary."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from k4w.model import config as config_mod
from k4w import render
from k4w.cluster import up as up_mod
from k4w.derive.cluster import Cluster
from tests.fakes.cluster_world import FakeClock, FakeWorld
from tests.helpers import config_dict


def render_to(out: Path, data: dict, **kube) -> Cluster:
    """Render a config dict into out; kube overrides fields of its Kubernetes era (another kubeadm API, ...)."""
    cluster = Cluster.resolve(config_mod.parse(yaml.safe_dump(data), "test.yml"))
    if kube:
        cluster = dataclasses.replace(cluster, kube=dataclasses.replace(cluster.kube, **kube))
    render.write_atomically(render.render_files(cluster, out), out)
    return cluster


@pytest.fixture
def default_render(tmp_path):
    out = tmp_path / "build"
    cluster = render_to(out, config_dict())
    return cluster, out


LINUX_ONLY_VXLAN = {
    "cluster": {"name": "k4wvx"},
    "network": {"backend": "vxlan"},
    "nodes": [
        {"name": "master", "role": "master", "box": "ubuntu-1604", "ip": "192.168.250.10"},
        {"name": "worker-a", "role": "worker", "box": "ubuntu-1604", "ip": "192.168.250.11"},
    ],
}


def machines_of(out: Path) -> list[dict]:
    return json.loads((out / "vagrant" / "cluster.json").read_text())["machines"]


@pytest.fixture
def world(default_render):
    """The fake Vagrant, guests, host and clock of the default render (tests/fakes/cluster_world.py)."""
    cluster, out = default_render
    w = FakeWorld(machines_of(out))
    w.cluster, w.out, w.clock = cluster, out, FakeClock()
    return w


def run_up(world, **kw):
    return up_mod.cluster_up(world.cluster, world.out, validate=False, vagrant=world.vagrant, remote=world.remote,
                             host=world.host, clock=world.clock, virsh=world.virsh, **kw)


def write_box_catalogues(out: Path, version: str = "20240101.120000") -> None:
    """OUT/boxes/<box>.json as a finished build leaves them (k4w.bake.catalogue), for the fake vagrant's `box add`."""
    for box in ("ubuntu-1604", "windows-1803"):
        catalogue = out / "boxes" / f"{box}.json"
        catalogue.parent.mkdir(parents=True, exist_ok=True)
        catalogue.write_text(json.dumps({"name": f"k4w/{box}", "versions": [
            {"version": version, "providers": [{"name": "hyperv", "url": "file:///x.box"}]}]}))


def libvirt_config(**overrides) -> dict:
    """cluster.yml for host.provider libvirt: the modern boxes (master and Linux worker ubuntu-2404, Windows
    worker windows-2022, vxlan) with cluster.yml's hyperv block dropped (config_rules refuses the other
    provider's block) and the libvirt block's defaults; overrides as in config_dict."""
    from tests.helpers import modern_config

    data = modern_config(**{"host.provider": "libvirt", **overrides})
    data.pop("hyperv", None)
    return data
