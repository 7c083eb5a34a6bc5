"""Every kubeadm timeout k4w renders, on every master box and in every worker's join configuration, is either a readiness wait that follows
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


def join_docs(worker_box: str) -> list[dict]:
    """The join configuration cluster-up hands a worker of this box (the sample token of `invoke validate`)."""
    from k4w.derive import join_config
    data = yaml.safe_load((ROOT / "examples" / "cluster-modern.yml").read_text())
    data["cluster"]["ready_timeout"] = READY_TIMEOUT
    cluster = Cluster.resolve(parse(yaml.safe_dump(data)))
    return [join_config.worker_document(worker_box, "192.0.2.1:6443", join_config.SAMPLE_TOKEN, join_config.SAMPLE_HASH,
                                        "w1", None, timeouts=cluster.join_timeouts)]


WORKER_BOXES = sorted(p.stem for p in (ROOT / "boxes").glob("*.yml"))


@pytest.mark.parametrize("docs", [pytest.param(("master", b), id=f"master-{b}") for b in UBUNTU_MASTERS] +
                         [pytest.param(("worker", b), id=f"worker-{b}") for b in WORKER_BOXES])
def test_every_kubeadm_timeout_is_a_readiness_wait_or_a_named_bound(docs):
    role, master_box = docs
    found = list(timeouts_of(kubeadm_docs(master_box) if role == "master" else join_docs(master_box)))
    for path, key, value in found:
        if key in kubeadm_timeouts.READINESS or key in kubeadm_timeouts.JOIN_READINESS:
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


def test_a_v1beta4_worker_join_waits_as_long_as_cluster_up():
    # The two-node libvirt run's worker gave up at kubeadm's 5-minute discovery default while the master's
    # kube-apiserver was starved; cluster-up itself would have waited cluster.ready_timeout.
    join = join_docs("ubuntu-2604")[0]
    assert join["timeouts"] == {"discovery": f"{READY_TIMEOUT}s", "tlsBootstrap": f"{READY_TIMEOUT}s",
                                "kubeletHealthCheck": f"{READY_TIMEOUT}s", "kubernetesAPICall": "600s"}
    assert "timeouts" not in join_docs("ubuntu-1604")[0]   # kubeadm 1.11's NodeConfiguration has no such map


def test_a_join_timeout_kubeadm_does_not_know_is_refused(monkeypatch):
    """Plant: a misspelt wait. cluster-up and validate hold the join configuration to kubeadm's field table."""
    from k4w.derive import join_config
    from k4w.infra.errors import K4wError
    monkeypatch.setattr(kubeadm_timeouts, "JOIN_READINESS", {"discoveryTimeout": "planted"})
    with pytest.raises(K4wError, match="discoveryTimeout"):
        join_config.for_worker("ubuntu-2604", "192.0.2.1:6443", join_config.SAMPLE_TOKEN, join_config.SAMPLE_HASH, "w1",
                               timeouts=kubeadm_timeouts.join(900))
    with pytest.raises(K4wError, match="kubeadm join timeouts .discovery. need kubeadm.k8s.io/v1beta4; w1 speaks "
                                       "kubeadm.k8s.io/v1alpha2"):
        join_config.document(join_config.V1ALPHA2, "192.0.2.1:6443", "t", "h", "w1", None, timeouts={"discovery": "1s"})


def test_on_an_emulated_cpu_the_first_api_answer_waits_as_long_as_cluster_up():
    """The third two-node libvirt run's kubeadm init gave up after the 600 s bound while ready_timeout was 2400 s:
    on tcg (only) kubernetesAPICall follows ready_timeout, never below its bound."""
    assert kubeadm_timeouts.rendered(READY_TIMEOUT, emulated_cpu=True) == {
        "controlPlaneComponentHealthCheck": f"{READY_TIMEOUT}s", "kubernetesAPICall": f"{READY_TIMEOUT}s"}
    assert kubeadm_timeouts.rendered(300, emulated_cpu=True)["kubernetesAPICall"] == "600s"
    assert kubeadm_timeouts.join(READY_TIMEOUT, emulated_cpu=True)["kubernetesAPICall"] == f"{READY_TIMEOUT}s"
    assert kubeadm_timeouts.rendered(READY_TIMEOUT)["kubernetesAPICall"] == "600s"
