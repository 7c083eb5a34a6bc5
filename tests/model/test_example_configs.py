"""The example configs in examples/ (issue 14: the modern stack ships as a second config beside
cluster.yml, which stays the seed stack's default)."""

from __future__ import annotations

import pytest
import yaml

from tests.helpers import ROOT, invoke, write_config

MODERN = ROOT / "examples" / "cluster-modern.yml"
# The modern stack on the previous LTS pair, kept beside it.
MODERN_2022 = ROOT / "examples" / "cluster-modern-2022.yml"
EXAMPLES = {
    MODERN: ("ubuntu-2604", "windows-2025"),
    MODERN_2022: ("ubuntu-2404", "windows-2022"),
}


@pytest.mark.parametrize("example", list(EXAMPLES), ids=lambda p: p.name)
def test_each_modern_example_is_two_ubuntu_nodes_and_a_windows_worker_on_vxlan(example):
    ubuntu, windows = EXAMPLES[example]
    data = yaml.safe_load(example.read_text())
    assert [(n["role"], n["box"]) for n in data["nodes"]] == [("master", ubuntu), ("worker", ubuntu), ("worker", windows)]
    assert data["network"]["backend"] == "vxlan"
    # every key of cluster.yml, so nothing a user knows from the default is missing here
    seed = yaml.safe_load((ROOT / "cluster.yml").read_text())
    assert {k: set(v) for k, v in data.items() if isinstance(v, dict)} == {k: set(v) for k, v in seed.items() if isinstance(v, dict)}


def test_every_example_and_the_default_can_live_on_one_host():
    """Hyper-V VM names, the cluster switch and the node subnet differ between all three configs."""
    configs = [yaml.safe_load(path.read_text()) for path in (ROOT / "cluster.yml", *EXAMPLES)]
    for key in (("cluster", "name"), ("hyperv", "cluster_switch"), ("network", "node_cidr")):
        values = [config[key[0]][key[1]] for config in configs]
        assert len(set(values)) == len(values), (key, values)


def test_every_box_profile_is_in_some_example_or_the_default():
    """A profile no config uses is one no test renders end to end."""
    used = {n["box"] for path in (ROOT / "cluster.yml", *EXAMPLES) for n in yaml.safe_load(path.read_text())["nodes"]}
    assert used == {p.stem for p in (ROOT / "boxes").glob("*.yml")}


@pytest.mark.tools
@pytest.mark.parametrize("example", list(EXAMPLES), ids=lambda p: p.name)
def test_each_modern_example_renders_and_passes_the_real_validate(example, tmp_path):
    out = tmp_path / "out"
    rendered = invoke("render", "--config", str(example), "--out", str(out))
    assert rendered.returncode == 0, rendered.stdout + rendered.stderr
    result = invoke("validate", "--config", str(example), "--out", str(out))
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    ubuntu, windows = EXAMPLES[example]
    assert (out / "packer" / f"{ubuntu}.pkr.hcl").is_file() and (out / "http" / windows / "Autounattend.xml").is_file()
    assert "✓ Windows container images: 1 checked" in output


def test_vxlan_with_a_box_that_cannot_do_it_stays_an_error(tmp_path):
    """The modern example with its Windows worker swapped for 1803 (supports_vxlan: false)."""
    data = yaml.safe_load(MODERN.read_text())
    data["nodes"] = [{**n, "box": "ubuntu-1604" if n["box"].startswith("ubuntu-") else "windows-1803"} for n in data["nodes"]]
    cfg = write_config(tmp_path / "cluster.yml", data)
    out = tmp_path / "out"
    result = invoke("validate", "--config", str(cfg), "--out", str(out))
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "network.backend: vxlan is not supported by box windows-1803 (nodes[2])" in result.stderr, result.stderr
    assert not out.exists()  # refused before --out or its lock is created


@pytest.mark.parametrize("master, worker, expected", [
    # The seed era's Windows box beside the 2026 master: planned, built, and never joined before this rule.
    ("ubuntu-2604", "windows-1803", "nodes[2].box: Kubernetes version: worker-win's box windows-1803 runs kubelet 1.11.10, "
                                    "26 minor versions older than the cluster's API server 1.37.2 (the master's box ubuntu-2604); "
                                    "the version-skew policy allows at most 2; pick boxes of one era"),
    # A kubelet newer than the API server is refused too.
    ("ubuntu-1604", "windows-2025", "nodes[2].box: Kubernetes version: worker-win's box windows-2025 runs kubelet 1.37.2, "
                                    "newer than the cluster's API server 1.11.10 (the master's box ubuntu-1604)"),
])
def test_boxes_of_two_eras_in_one_cluster_are_refused_before_anything_runs(tmp_path, master, worker, expected):
    data = yaml.safe_load(MODERN.read_text())
    data["network"]["backend"] = "host-gw" if worker == "windows-1803" else "vxlan"
    data["nodes"] = [{**n, "box": worker if n["box"].startswith("windows-") else master} for n in data["nodes"]]
    cfg = write_config(tmp_path / "cluster.yml", data)
    result = invoke("plan", "--config", str(cfg), "--out", str(tmp_path / "out"))
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert expected in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()  # refused before anything was written
