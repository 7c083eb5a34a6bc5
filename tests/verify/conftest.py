"""Fixtures for the verify tests: run a live spec in a child pytest and read its result, and an
OUT as the build runner leaves it."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from k4w.model import config as config_mod
from k4w.infra import sources
from k4w import render
from k4w.derive.cluster import Cluster
from k4w.infra.sources import REPO_ROOT as ROOT

SPECS = ROOT / "k4w" / "verify" / "specs"


@dataclass
class SpecRun:
    proc: subprocess.CompletedProcess
    result: dict | None
    junit: Path

    @property
    def output(self) -> str:
        return self.proc.stdout + self.proc.stderr


@pytest.fixture
def profile_dir(tmp_path) -> Path:
    """A copy of the real profiles that a test may edit; spec runs read it first (K4W_BOX_DIRS)."""
    folder = tmp_path / "profiles"
    folder.mkdir()
    for path in (ROOT / "boxes").glob("*.yml"):
        shutil.copy(path, folder / path.name)
    return folder


@pytest.fixture
def run_spec(tmp_path, profile_dir):
    def run(specs: list[str], *args: str, timeout: int = 120) -> SpecRun:
        result = tmp_path / "result.json"
        junit = tmp_path / "junit.xml"
        result.unlink(missing_ok=True)
        env = {**os.environ, sources.BOX_DIRS_ENV: str(profile_dir), "PYTHONPATH": str(ROOT)}
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", *[str(SPECS / s) for s in specs], f"--rootdir={ROOT}",
             "-p", "no:cacheprovider", "-p", "no:hypothesispytest", f"--junitxml={junit}", f"--k4w-result={result}", *args],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False,
        )
        data = json.loads(result.read_text()) if result.is_file() else None
        return SpecRun(proc, data, junit)

    return run


@pytest.fixture
def closed_port() -> int:
    """A localhost TCP port nobody listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def built(tmp_path):
    """A rendered OUT with a box catalogue and a build record, as the build runner leaves them."""
    cluster = Cluster.load(ROOT / "cluster.yml")
    out = tmp_path / "build"
    render.render(cluster, out)
    boxes = out / "boxes"
    boxes.mkdir()
    for box in cluster.config.boxes():
        versions = [{"version": v, "providers": [{"name": "hyperv", "url": "file:///x.box"}]} for v in ("20261120.101010", "20261121.090000")]
        (boxes / f"{box}.json").write_text(json.dumps({"name": f"k4w/{box}", "versions": versions}))
        (boxes / f"{box}.record.json").write_text(json.dumps({"box": box, "version": "20261121.090000", "test": None}))
    return cluster, out


@pytest.fixture
def cluster_yml() -> Path:
    return ROOT / "cluster.yml"


def pytest_configure(config):
    # The markers the live specs use (registered for real by k4w/verify/specs/conftest.py); these
    # tests build parameters carrying them.
    config.addinivalue_line("markers", "k4w_deselect(reason): not applicable to this cluster")
