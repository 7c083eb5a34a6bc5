"""Every kubeadm timeout k4w renders, on every master box, is either a readiness wait that follows
cluster.ready_timeout or a named bound of k4w.model.kubeadm_timeouts with its reason, never ready_timeout by
accident: kubeadm retries a permanent refusal (RBAC, validation) for as long as a retry bound says."""

from __future__ import annotations

import pytest
import yaml

from k4w.model import kubeadm_timeouts
from k4w import render
from k4w.derive.cluster import Cluster
from k4w.model.config import parse
from tests.helpers import ROOT

# A ready_timeout no named bound equals, so a field that follows it by mistake shows.
READY_TIMEOUT = 4321
UBUNTU_MASTERS = sorted(p.stem for p in (ROOT / "boxes").glob("ubuntu-*.yml"))


def timeouts_of(node, where=""):
    """(path, value) of every key kubeadm reads as a timeout: the children of a `timeouts` map and any
    key named like one (the older APIs' apiServer.timeoutForControlPlane, ...)."""
    if isinstance(node, dict):
        for key, value in node.items():
            here = f"{where}.{key}" if where else key
            if key == "timeouts" and isinstance(value, dict):
                yield from ((f"{here}.{k}", k, v) for k, v in value.items())
            elif "timeout" in key.lower():
                yield here, key, value
            else:
                yield from timeouts_of(value, here)
    elif isinstance(node, list):
        for i, item in enumerate(node):
            yield from timeouts_of(item, f"{where}[{i}]")


def kubeadm_docs(master_box: str) -> list[dict]:
    data = yaml.safe_load((ROOT / "examples" / "cluster-modern.yml").read_text())
    data["cluster"]["ready_timeout"] = READY_TIMEOUT
    data["nodes"] = [n for n in data["nodes"] if n["role"] == "master"]
    data["nodes"][0]["box"] = master_box
    if master_box == "ubuntu-1604":
        data["network"]["backend"] = "host-gw"
    cluster = Cluster.resolve(parse(yaml.safe_dump(data)))
    text = render.render_files(cluster, ROOT / "build-test-unused")["kubeadm/kubeadm-config.yaml"]
    return [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]


@pytest.mark.parametrize("master_box", UBUNTU_MASTERS)
def test_every_kubeadm_timeout_is_a_readiness_wait_or_a_named_bound(master_box):
    found = list(timeouts_of(kubeadm_docs(master_box)))
    for path, key, value in found:
        if key in kubeadm_timeouts.READINESS:
            assert value == f"{READY_TIMEOUT}s", f"{master_box}: {path} waits for readiness but is {value}, not cluster.ready_timeout"
        else:
            assert key in kubeadm_timeouts.BOUNDED, \
                f"{master_box}: {path} = {value} is neither a readiness wait nor a named bound in k4w/model/kubeadm_timeouts.py"
            bound = kubeadm_timeouts.BOUNDED[key]
            assert bound.why and value == f"{bound.seconds}s", f"{master_box}: {path} is {value}, not its named bound {bound.seconds}s"
            assert value != f"{READY_TIMEOUT}s", f"{master_box}: {path} follows cluster.ready_timeout"


def test_the_v1beta4_master_renders_the_api_call_bound():
    # kubeadm 1.37's default (1m) failed `kubeadm init` on a slow master; ready_timeout would retry a
    # permanent refusal for 15 min or more.
    init = next(d for d in kubeadm_docs("ubuntu-2604") if d.get("kind") == "InitConfiguration")
    assert init["timeouts"] == {"controlPlaneComponentHealthCheck": f"{READY_TIMEOUT}s", "kubernetesAPICall": "600s"}
