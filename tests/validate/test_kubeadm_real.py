"""`invoke validate` hands every containerd-era kubeadm config (the master's init config, each worker's
join config) to the REAL kubeadm of the pinned version (the tool cache scripts/build-tools fills):
`kubeadm config validate`, and `kubeadm init --dry-run` for the init config. Planted defects are
refused by kubeadm itself, through the real `invoke validate`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from k4w.infra import pinned_tools
from k4w.infra import sources
from k4w.derive.cluster import Cluster
from k4w.infra.errors import ToolMissing
from k4w.validate import kubeadm_real
from tests.helpers import MODERN_ENV, ROOT, invoke, modern_config, write_config

MODERN = ROOT / "examples" / "cluster-modern.yml"
# What a repository copy needs for `invoke validate` to render and check everything (docs/architecture.md "Folders").
REPOSITORY = ("boxes", "examples", "guest", "host", "iso", "k4w", "scripts", "templates", "tools", "vagrant", ".ci",
              "tasks.py", "pyproject.toml", "cluster.yml")


def _output(result) -> str:
    return result.stdout + result.stderr


@pytest.mark.tools
@pytest.mark.parametrize("example, windows_box", [(MODERN, "windows-2025"), (ROOT / "examples" / "cluster-modern-2022.yml", "windows-2022")],
                         ids=["2025+26.04", "2022+24.04"])
def test_the_real_kubeadm_reads_every_containerd_era_kubeadm_config(tmp_path, example, windows_box):
    result = invoke("validate", "--config", str(example), "--out", str(tmp_path / "out"), env=MODERN_ENV)
    output = _output(result)
    assert result.returncode == 0, output
    # The master's init config, the Linux worker's and the Windows worker's join configs.
    assert "✓ kubeadm config (real kubeadm): 3 checked by kubeadm config validate + init --dry-run" in output
    assert ("kubeadm/kubeadm-config.yaml: kubeadm init --dry-run ran every phase (preflight ignored: this host is no "
            "node), 4 static Pod manifests") in output
    # The one warning Linux kubeadm gives a Windows endpoint is said, not hidden and not fatal.
    assert f"join configuration of worker-win ({windows_box}, sample token): kubeadm on Linux warns (a Windows endpoint)" in output


def _repository_copy(root: Path) -> Path:
    for name in REPOSITORY:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, root / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif source.is_file():
            shutil.copy2(source, root / name)
    return root


@pytest.mark.tools
def test_kubeadm_refuses_a_planted_bad_value_and_a_planted_unknown_field(tmp_path):
    """Run from a copy of the repository (python -m invoke puts its folder first on sys.path, so the
    copy's k4w and templates are the ones that run) with two defects planted:
    - a bad value in the init config: a bind port no TCP port can have;
    - an unknown field in every join config (kubeadm decodes strictly)."""
    copy = _repository_copy(tmp_path / "repo")
    template = copy / "templates" / "kubeadm" / "api" / "v1beta4.yaml.j2"
    text = template.read_text()
    assert "  bindPort: << net.api_port | yaml >>\n" in text
    template.write_text(text.replace("  bindPort: << net.api_port | yaml >>\n", "  bindPort: 70000\n"))
    join = copy / "k4w" / "derive" / "join_config.py"
    text = join.read_text()
    assert '    registration = {"name": node_name, ' in text
    join.write_text(text.replace('    registration = {"name": node_name, ', '    registration = {"nodeNmae": node_name, "name": node_name, '))
    config = write_config(tmp_path / "cluster.yml", modern_config())
    # From the copy's folder, as a user types it there: its tasks.py, and its k4w first on sys.path.
    result = subprocess.run([sys.executable, "-m", "invoke", "validate", "--config", str(config), "--out", str(tmp_path / "out")],
                            cwd=copy, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "COLUMNS": "200", sources.BOX_DIRS_ENV: str(copy / "boxes")})
    output = _output(result)
    assert result.returncode == 1 and "Traceback" not in output, output
    assert "✗ kubeadm config (real kubeadm)" in output
    assert ("kubeadm/kubeadm-config.yaml: kubeadm config validate refused it: error: localAPIEndpoint.bindPort: "
            "Invalid value: 70000: port number is not valid") in output, output
    for worker, box in (("worker-linux", "ubuntu-2404"), ("worker-win", "windows-2022")):
        assert (f"join configuration of {worker} ({box}, sample token): kubeadm config validate refused it: error: "
                'error unmarshaling configuration schema.GroupVersionKind{Group:"kubeadm.k8s.io", Version:"v1beta4", '
                'Kind:"JoinConfiguration"}: strict decoding error: unknown field "nodeRegistration.nodeNmae"') in output, output
    # The refused init config gets no dry run: kubeadm already said why.
    assert "kubeadm init --dry-run ran every phase" not in output


def _modern_cluster(tmp_path, monkeypatch) -> tuple[Cluster, Path]:
    monkeypatch.setenv(sources.BOX_DIRS_ENV, MODERN_ENV[sources.BOX_DIRS_ENV])
    config = write_config(tmp_path / "cluster.yml", modern_config())
    result = invoke("render", "--config", str(config), "--out", str(tmp_path / "out"), env=MODERN_ENV)
    assert result.returncode == 0, _output(result)
    return Cluster.load(config), tmp_path / "out"


def test_a_missing_kubeadm_names_scripts_build_tools(tmp_path, monkeypatch):
    cluster, out = _modern_cluster(tmp_path, monkeypatch)
    monkeypatch.setenv("K4W_TOOLS_DIR", str(tmp_path / "empty-cache"))
    with pytest.raises(ToolMissing) as caught:
        kubeadm_real.check(cluster, out)
    assert str(caught.value) == (
        "'kubeadm (kubernetes-node v1.37.2, tools/lock.yml)' is not installed. Install it with: scripts/build-tools "
        f"(it builds into {tmp_path / 'empty-cache' / 'kubernetes-node-v1.37.2'}; K4W_TOOLS_DIR moves the cache)")


def test_a_kubeadm_of_another_release_is_refused(tmp_path, monkeypatch):
    cluster, _ = _modern_cluster(tmp_path, monkeypatch)
    assert kubeadm_real._version_problems(cluster, Path("kubeadm")) == []
    lock = pinned_tools.lock()
    monkeypatch.setattr(pinned_tools, "lock", lambda: {**lock, "kubernetes-node": {**lock["kubernetes-node"], "version": "v1.37.3"}})
    assert kubeadm_real._version_problems(cluster, Path("kubeadm")) == [
        "the cluster runs Kubernetes 1.37.2, the pinned kubeadm (kubeadm) is v1.37.3 (tools/lock.yml kubernetes-node): "
        "it would judge the config by another release's rules; pin the same release in both"]


def test_the_seed_era_needs_no_kubeadm_and_says_why(tmp_path, monkeypatch):
    result = invoke("render", "--out", str(tmp_path / "out"))
    assert result.returncode == 0, _output(result)
    monkeypatch.setenv("K4W_TOOLS_DIR", str(tmp_path / "empty-cache"))
    outcome = kubeadm_real.check(Cluster.load(ROOT / "cluster.yml"), tmp_path / "out")
    assert outcome.checked == [] and outcome.problems == []
    assert outcome.notes[0].startswith("no kubeadm kubeadm.k8s.io/v1beta4 config in this cluster")
