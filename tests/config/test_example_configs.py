"""The example configs in examples/ (issue 14: the modern stack ships as a second config beside
cluster.yml, which stays the seed stack's default)."""

from __future__ import annotations

import pytest
import yaml

from tests.helpers import ROOT, invoke, write_config

MODERN = ROOT / "examples" / "cluster-modern.yml"


def test_the_modern_example_is_two_ubuntu_2404_nodes_and_a_windows_2022_worker_on_vxlan():
    data = yaml.safe_load(MODERN.read_text())
    assert [(n["role"], n["box"]) for n in data["nodes"]] == [
        ("master", "ubuntu-2404"), ("worker", "ubuntu-2404"), ("worker", "windows-2022")]
    assert data["network"]["backend"] == "vxlan"
    # every key of cluster.yml, so nothing a user knows from the default is missing here
    seed = yaml.safe_load((ROOT / "cluster.yml").read_text())
    assert {k: set(v) for k, v in data.items() if isinstance(v, dict)} == {k: set(v) for k, v in seed.items() if isinstance(v, dict)}


@pytest.mark.tools
def test_the_modern_example_renders_and_passes_the_real_validate(tmp_path):
    out = tmp_path / "out"
    rendered = invoke("render", "--config", str(MODERN), "--out", str(out))
    assert rendered.returncode == 0, rendered.stdout + rendered.stderr
    result = invoke("validate", "--config", str(MODERN), "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr


def test_vxlan_with_a_box_that_cannot_do_it_stays_an_error(tmp_path):
    """The modern example with its Windows worker swapped for 1803 (supports_vxlan: false)."""
    data = yaml.safe_load(MODERN.read_text())
    data["nodes"] = [{**n, "box": "ubuntu-1604" if n["box"] == "ubuntu-2404" else "windows-1803"} for n in data["nodes"]]
    cfg = write_config(tmp_path / "cluster.yml", data)
    out = tmp_path / "out"
    result = invoke("validate", "--config", str(cfg), "--out", str(out))
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "network.backend: vxlan is not supported by box windows-1803 (nodes[2])" in result.stderr, result.stderr
    assert not out.exists()  # refused before --out or its lock is created
