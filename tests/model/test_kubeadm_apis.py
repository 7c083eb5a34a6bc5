"""A box profile cannot pin a kubeadm config API that its own kubeadm refuses: kubeadm 1.37 reads v1beta4
only (v1beta3 is removed; k8s.io/kubernetes@v1.37.2 cmd/kubeadm/app/util/config/common.go)."""

from __future__ import annotations

import shutil

import pytest
import yaml

from k4w.model import kubeadm_apis
from k4w.infra import sources
from k4w.infra.sources import REPO_ROOT as ROOT
from tests.helpers import invoke


def _boxes_with(tmp_path, api: str, version: str | None = None):
    boxes = tmp_path / "boxes"
    shutil.copytree(ROOT / "boxes", boxes)
    profile = boxes / "ubuntu-2604.yml"  # the master of examples/cluster-modern.yml
    text = profile.read_text().replace("  kubeadm_api: kubeadm.k8s.io/v1beta4\n", f"  kubeadm_api: {api}\n", 1)
    if version:
        text = text.replace('  version: "1.37.2"\n', f'  version: "{version}"\n', 1)
    profile.write_text(text)
    return boxes


def test_v1beta3_on_kubernetes_1_37_is_refused_before_anything_renders(tmp_path):
    boxes = _boxes_with(tmp_path, "kubeadm.k8s.io/v1beta3")
    out = tmp_path / "out"
    result = invoke("render", "--config", str(ROOT / "examples" / "cluster-modern.yml"), "--out", str(out),
                    env={sources.BOX_DIRS_ENV: str(boxes)})
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "Traceback" not in output
    assert ("ubuntu-2604.yml: kubernetes.kubeadm_api kubeadm.k8s.io/v1beta3 with kubernetes.version 1.37.2: kubeadm 1.37 "
            "no longer reads kubeadm.k8s.io/v1beta3 (kubeadm 1.36 is the last that does;") in " ".join(output.split())
    assert "use kubeadm.k8s.io/v1beta4" in output
    assert not out.exists()


@pytest.mark.parametrize("api,version,accepted", [
    ("kubeadm.k8s.io/v1beta4", "1.37.2", True),
    ("kubeadm.k8s.io/v1beta3", "1.36.3", True),   # the last kubeadm that reads it
    ("kubeadm.k8s.io/v1beta3", "1.37.0", False),
    ("kubeadm.k8s.io/v1beta4", "1.30.14", False),  # v1beta4 arrived in 1.31
    ("kubeadm.k8s.io/v1alpha2", "1.11.10", True),  # the seed era
    ("kubeadm.k8s.io/v1", "1.37.2", False),        # experimental: --allow-experimental-api only
    ("kubeadm.k8s.io/v1beta5", "1.37.2", False),   # no such API
])
def test_each_api_is_read_by_exactly_the_kubeadm_releases_its_source_names(api, version, accepted):
    assert (kubeadm_apis.problem(api, version) is None) == accepted


def test_every_shipped_profile_pins_an_api_its_kubeadm_reads():
    for path in sorted((ROOT / "boxes").glob("*.yml")) + sorted((ROOT / "ci" / "e2e" / "boxes").glob("*.yml")):
        kube = yaml.safe_load(path.read_text())["kubernetes"]
        assert kubeadm_apis.problem(kube["kubeadm_api"], kube["version"]) is None, path.name
