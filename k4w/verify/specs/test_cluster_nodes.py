"""Cluster spec, nodes and system pods: run from the host with build/kubeconfig (kubectl).

Every node of cluster.yml must be registered, Ready and labelled with its OS under the
label of the cluster's Kubernetes era; kube-system must be healthy; a containerd-era Windows node
must run its flanneld and kube-proxy pods (the HostProcess DaemonSets); and Windows and Linux
workloads must land on their own OS only.
"""

from __future__ import annotations

import pytest

from k4w.model import config as config_mod, profiles
from k4w.derive import identities, node_marks
from k4w.verify.kubectl import node_ready, pod_ready, pod_state
from k4w.infra.redact import redact

pytestmark = [pytest.mark.infra, pytest.mark.k4w_spec("cluster")]


def pytest_generate_tests(metafunc):
    # One test per node of cluster.yml, named after it. (Without --k4w-config, the collection
    # hook in conftest.py stops the run with a usage error before anything runs.)
    path = metafunc.config.getoption("--k4w-config")
    nodes = config_mod.load(path).nodes if path else []
    if "node" in metafunc.fixturenames:
        metafunc.parametrize("node", nodes, ids=[n.name for n in nodes])
    if "worker" in metafunc.fixturenames:
        workers = [n for n in nodes if n.role != "master"]
        metafunc.parametrize("worker", workers, ids=[n.name for n in workers])
    if "hostprocess_node" in metafunc.fixturenames:
        # Only Windows nodes whose flanneld and kube-proxy are HostProcess DaemonSets (the containerd
        # era); a cluster without one reports this check as not applicable, never as passed.
        wanted = [n for n in nodes if profiles.load(n.box).is_windows and identities.runs_hostprocess(profiles.load(n.box))]
        params = [pytest.param(n, id=n.name) for n in wanted] or [pytest.param(None, id="none", marks=pytest.mark.k4w_deselect(
            "no Windows node of cluster.yml runs flanneld and kube-proxy as HostProcess DaemonSets (the seed era runs them as services)"))]
        metafunc.parametrize("hostprocess_node", params)


@pytest.fixture(scope="module")
def live_nodes(kubectl) -> dict[str, dict]:
    return {n["metadata"]["name"]: n for n in kubectl.items("nodes")}


def _node_os(node_obj: dict, os_label: str) -> str | None:
    return node_obj["metadata"].get("labels", {}).get(os_label)


@pytest.mark.k4w_check("nodes")
def test_node_registered_and_ready(node, live_nodes):
    assert node.name in live_nodes, f"node {node.name} is not registered (registered: {sorted(live_nodes)})"
    conditions = {c["type"]: c.get("message", c["status"]) for c in live_nodes[node.name]["status"]["conditions"]}
    assert node_ready(live_nodes[node.name]), f"node {node.name} is not Ready: {conditions}"


@pytest.mark.k4w_check("nodes")
def test_node_os_label(node, live_nodes, os_label):
    assert node.name in live_nodes, f"node {node.name} is not registered"
    wanted = profiles.load(node.box).data.node_os
    found = _node_os(live_nodes[node.name], os_label)
    assert found == wanted, f"node {node.name} has {os_label}={found!r}, its box {node.box} is {wanted}"


@pytest.mark.k4w_check("system_pods")
def test_kube_system_pods_running(kubectl):
    pods = kubectl.items("pods", "-n", "kube-system")
    assert pods, "kube-system has no pods at all"
    unhealthy = [pod_state(p) for p in pods if not pod_ready(p)]
    assert not unhealthy, redact("kube-system pods not Running and ready:\n  " + "\n  ".join(unhealthy))


@pytest.mark.k4w_check("nodes")
def test_worker_carries_k4ws_marks(worker, live_nodes):
    """The label a worker's kubelet registered with at join (k4w's Windows DaemonSets select it), and on
    Windows the taint that keeps pods naming no OS off it (k4w/derive/node_marks.py). One test per worker: the
    master is made by kubeadm init, not joined."""
    node = worker
    assert node.name in live_nodes, f"node {node.name} is not registered"
    live = live_nodes[node.name]
    key, value = node_marks.NODE_LABEL
    problems = []
    if (live["metadata"].get("labels") or {}).get(key) != value:
        problems.append(f"no label {key}={value}")
    taints = [{k: t.get(k) for k in ("key", "value", "effect")} for t in (live.get("spec") or {}).get("taints") or []]
    if profiles.load(node.box).is_windows and node_marks.WINDOWS_TAINT not in taints:
        problems.append(f"no taint {node_marks.taint_flag(node_marks.WINDOWS_TAINT)} (has {taints})")
    assert not problems, f"node {node.name}: " + "; ".join(problems)


@pytest.mark.k4w_check("windows_daemonsets")
def test_windows_node_runs_its_flanneld_and_kube_proxy_pods(hostprocess_node, kubectl):
    """A Windows node whose box runs them as HostProcess DaemonSets (hostprocess: in its profile) has
    one pod of each DaemonSet Running and ready on it. One test per such node."""
    name = hostprocess_node.name
    pods = kubectl.items("pods", "-n", identities.HOSTPROCESS_NAMESPACE, "--field-selector", f"spec.nodeName={name}")
    problems = []
    for daemon in identities.HOSTPROCESS_DAEMONSETS:
        mine = [p for p in pods if (p["metadata"].get("labels") or {}).get("app.kubernetes.io/name") == daemon.daemonset]
        if not mine:
            problems.append(f"no pod of DaemonSet {identities.HOSTPROCESS_NAMESPACE}/{daemon.daemonset} on {name}")
        problems += [pod_state(p) for p in mine if not pod_ready(p)]
    assert not problems, redact(f"{name}: its flanneld and kube-proxy pods are not Running and ready:\n  " + "\n  ".join(problems))


@pytest.mark.k4w_check("placement")
def test_pods_run_on_their_own_os(kubectl, live_nodes, os_label):
    misplaced = []
    for pod in kubectl.items("pods", "--all-namespaces"):
        node_name = pod["spec"].get("nodeName")
        if not node_name or node_name not in live_nodes:
            continue
        node_os = _node_os(live_nodes[node_name], os_label)
        wants = (pod["spec"].get("nodeSelector") or {}).get(os_label)
        where = f"{pod['metadata']['namespace']}/{pod['metadata']['name']} on {node_name} ({node_os})"
        if node_os == "windows" and wants != "windows":
            # e.g. kube-proxy/flannel DaemonSets without the Linux node selector patch
            misplaced.append(f"{where}: does not select {os_label}=windows")
        elif wants and wants != node_os:
            misplaced.append(f"{where}: selects {os_label}={wants}")
    assert not misplaced, "pods on the wrong OS:\n  " + "\n  ".join(misplaced)


@pytest.mark.k4w_check("placement")
def test_system_daemonsets_select_linux(kubectl, os_label):
    # Windows runs its own kube-proxy and flanneld (services, or the HostProcess DaemonSets in their
    # own namespace): kube-system's DaemonSets must stay on Linux.
    wrong = []
    for ds in kubectl.items("daemonsets", "-n", "kube-system"):
        selector = ds["spec"]["template"]["spec"].get("nodeSelector") or {}
        if selector.get(os_label) != "linux":
            wrong.append(f"{ds['metadata']['name']} (nodeSelector {selector})")
    assert not wrong, f"kube-system DaemonSets that can land on Windows nodes: {wrong}"
