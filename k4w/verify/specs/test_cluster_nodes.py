"""Cluster spec, nodes and system pods: run from the host with build/kubeconfig (kubectl).

Every node of cluster.yml must be registered, Ready and labelled with its OS under the
label of the cluster's Kubernetes era; kube-system must be healthy; and Windows and Linux
workloads must land on their own OS only.
"""

from __future__ import annotations

import pytest

from k4w import config as config_mod, profiles
from k4w.verify.kubectl import node_ready, pod_ready, pod_state
from k4w.redact import redact

pytestmark = [pytest.mark.infra, pytest.mark.k4w_spec("cluster")]


def pytest_generate_tests(metafunc):
    # One test per node of cluster.yml, named after it. (Without --k4w-config, the collection
    # hook in conftest.py stops the run with a usage error before anything runs.)
    if "node" in metafunc.fixturenames:
        path = metafunc.config.getoption("--k4w-config")
        nodes = config_mod.load(path).nodes if path else []
        metafunc.parametrize("node", nodes, ids=[n.name for n in nodes])


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
    # Windows runs kube-proxy and flanneld as services; their DaemonSets must stay on Linux.
    wrong = []
    for ds in kubectl.items("daemonsets", "-n", "kube-system"):
        selector = ds["spec"]["template"]["spec"].get("nodeSelector") or {}
        if selector.get(os_label) != "linux":
            wrong.append(f"{ds['metadata']['name']} (nodeSelector {selector})")
    assert not wrong, f"kube-system DaemonSets that can land on Windows nodes: {wrong}"
