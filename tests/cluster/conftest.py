"""Fixtures for the cluster tests: rendered artifacts in a temp dir, fakes at the process boundary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from k4w import config as config_mod, render
from tests.helpers import config_dict


def render_to(out: Path, data: dict) -> config_mod.Config:
    cfg = config_mod.parse(yaml.safe_dump(data), "test.yml")
    render.write_atomically(render.render_files(cfg, out), out)
    return cfg


@pytest.fixture
def default_render(tmp_path):
    out = tmp_path / "build"
    cfg = render_to(out, config_dict())
    return cfg, out


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
