"""The kubeadm config is held against the fields of kubeadm's own types at the master's kubeadm API
(k4w/validate/facts/kubeadm-config-<version>.yml): each rule fires on a broken variant of a real
render, and `invoke validate` fails, naming the file, for an API with no vendored table."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from k4w.model import kubeadm_fields as kubeadm_rules
from tests.helpers import MODERN_BOXES, ROOT, config_dict, invoke, modern_config, write_config

V1BETA4 = "kubeadm.k8s.io/v1beta4"


@pytest.fixture(scope="module")
def v1beta4_docs(tmp_path_factory) -> list[dict]:
    tmp = tmp_path_factory.mktemp("v1beta4")
    cfg = write_config(tmp / "cluster.yml", modern_config())
    result = invoke("render", "--config", str(cfg), "--out", str(tmp / "out"), env={"K4W_BOX_DIRS": str(MODERN_BOXES)})
    assert result.returncode == 0, result.stdout + result.stderr
    return list(yaml.safe_load_all((tmp / "out" / "kubeadm" / "kubeadm-config.yaml").read_text()))


def _check(tmp_path: Path, docs: list[dict], api: str = V1BETA4) -> list[str]:
    path = tmp_path / "kubeadm-config.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return kubeadm_rules.check(path, api)


def test_the_rendered_v1beta4_config_uses_only_fields_of_kubeadms_types(v1beta4_docs, tmp_path):
    assert _check(tmp_path, v1beta4_docs) == []


def test_the_rendered_seed_config_passes_against_v1alpha2(tmp_path):
    out = tmp_path / "out"
    assert invoke("render", "--out", str(out)).returncode == 0
    assert kubeadm_rules.check(out / "kubeadm" / "kubeadm-config.yaml", "kubeadm.k8s.io/v1alpha2") == []


def _init(docs):
    return next(d for d in docs if d["kind"] == "InitConfiguration")


def _cluster(docs):
    return next(d for d in docs if d["kind"] == "ClusterConfiguration")


BROKEN = {
    # v1alpha2..v1beta3 wrote kubeletExtraArgs as a map; v1beta4 refuses it.
    "kubeletExtraArgs as a map": (
        lambda docs: _init(docs)["nodeRegistration"].update(kubeletExtraArgs={"node-ip": "192.168.250.10"}),
        "InitConfiguration.nodeRegistration.kubeletExtraArgs: must be a list (v1beta4 takes a list of {name, value}, not a map)"),
    # v1beta3's apiServer.timeoutForControlPlane moved under timeouts in v1beta4.
    "timeout in its v1beta3 place": (
        lambda docs: _cluster(docs).update(apiServer={"timeoutForControlPlane": "4m0s"}),
        "ClusterConfiguration.apiServer.timeoutForControlPlane: APIServer has no field 'timeoutForControlPlane'"),
    "a misspelt field": (
        lambda docs: _init(docs)["localAPIEndpoint"].update(advertiseAdress="1.2.3.4"),
        "InitConfiguration.localAPIEndpoint.advertiseAdress: APIEndpoint has no field 'advertiseAdress'"),
    "a duration kubeadm cannot parse": (
        lambda docs: _init(docs)["timeouts"].update(controlPlaneComponentHealthCheck=900),
        "InitConfiguration.timeouts.controlPlaneComponentHealthCheck: must be a duration"),
    "an Arg without its value": (
        lambda docs: _init(docs)["nodeRegistration"].update(kubeletExtraArgs=[{"name": "node-ip"}]),
        "InitConfiguration.nodeRegistration.kubeletExtraArgs[0]: Arg needs 'value'"),
    "a port that is a string": (
        lambda docs: _init(docs)["localAPIEndpoint"].update(bindPort="6443"),
        "InitConfiguration.localAPIEndpoint.bindPort: must be an integer"),
    "a component-config field outside the vendored subset": (
        lambda docs: next(d for d in docs if d["kind"] == "KubeletConfiguration").update(maxPods=50),
        "KubeletConfiguration.maxPods: KubeletConfiguration has no field 'maxPods' in kubeadm.k8s.io/v1beta4 (not in the vendored subset"),
    "a kind kubeadm does not read": (
        lambda docs: docs.append({"apiVersion": V1BETA4, "kind": "MasterConfiguration"}),
        "kubeadm.k8s.io/v1beta4 MasterConfiguration is not a document kubeadm reads with kubeadm.k8s.io/v1beta4"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_each_rule_fires_on_a_broken_variant(case, v1beta4_docs, tmp_path):
    docs = copy.deepcopy(v1beta4_docs)
    edit, message = BROKEN[case]
    edit(docs)
    problems = _check(tmp_path, docs)
    assert len(problems) == 1 and message in problems[0], problems


def test_an_api_without_a_vendored_table_is_a_problem_not_a_pass(v1beta4_docs, tmp_path):
    problems = _check(tmp_path, v1beta4_docs, api="kubeadm.k8s.io/v1beta3")
    assert problems == ["kubeadm/kubeadm-config.yaml: no field table for kubeadm.k8s.io/v1beta3 in "
                        "k4w/validate/facts/kubeadm-config-v1beta3.yml: read the types from kubeadm's source at the tag "
                        "and vendor them before using that API"]


def test_every_field_table_names_its_upstream_source():
    for path in sorted((ROOT / "k4w" / "validate" / "facts").glob("kubeadm-config-*.yml")):
        table = yaml.safe_load(path.read_text())
        assert table["api"].endswith(path.stem.removeprefix("kubeadm-config-")), path
        assert table["source"]["repo"] and len(table["source"]["commit"]) == 40 and table["source"]["files"], path
        names = {t for kinds in table["documents"].values() for t in kinds.values()}
        assert names <= set(table["types"]), path


@pytest.mark.tools
def test_real_validate_fails_naming_the_kubeadm_config_for_an_api_without_a_table(tmp_path):
    """A master pinned to kubeadm v1beta3 renders (its template exists) but `invoke validate` stops:
    nothing vouches for the field names of that API yet."""
    boxes = tmp_path / "boxes"
    boxes.mkdir()
    data = yaml.safe_load((ROOT / "boxes" / "ubuntu-1604.yml").read_text())
    data.update(name="ubuntu-v1beta3")
    # A release whose kubeadm reads v1beta3 (1.22-1.36; k4w.model.kubeadm_apis refuses the pair otherwise).
    data["kubernetes"].update(kubeadm_api="kubeadm.k8s.io/v1beta3", version="1.25.16")
    (boxes / "ubuntu-v1beta3.yml").write_text(yaml.safe_dump(data))
    one_era = config_dict(**{"nodes.0.box": "ubuntu-v1beta3", "nodes.1.box": "ubuntu-v1beta3"})
    cfg = write_config(tmp_path / "cluster.yml", {**one_era, "nodes": one_era["nodes"][:2]})
    result = invoke("validate", "--config", str(cfg), "--out", str(tmp_path / "out"), env={"K4W_BOX_DIRS": str(boxes)})
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "Traceback" not in output
    assert "✗ kubeadm config" in output
    assert "kubeadm/kubeadm-config.yaml: no field table for kubeadm.k8s.io/v1beta3" in output, output
