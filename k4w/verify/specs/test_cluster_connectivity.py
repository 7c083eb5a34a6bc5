"""Cluster spec, connectivity matrix: one test per row of k4w.verify.matrix.MATRIX.

Workloads: the demo Windows web server (build/manifests), plus client and Linux server pods
this spec creates in namespace k4w-test and deletes afterwards. Probes run inside the pods
(kubectl exec), on this machine (external), or on a Windows node through its testinfra URL
(--k4w-node-url NODE=winrm://...).
"""

from __future__ import annotations

import urllib.parse

import pytest
import testinfra

from k4w.model import config as config_mod, profiles
from k4w.verify import matrix, probes, workloads as wl
from k4w.infra.proc import wait_for
from k4w.verify.kubectl import pod_ready, pod_state

pytestmark = [pytest.mark.infra, pytest.mark.k4w_spec("cluster")]

LINUX_POD_TIMEOUT = 300  # image pull from Docker Hub (through the nodes' proxy) + start
WINDOWS_POD_TIMEOUT = 900  # the box pre-pulls Server Core; a cold HNS endpoint still takes minutes
CLEANUP_TIMEOUT = 300


def _windows_nodes(cfg) -> list:
    return [n for n in cfg.nodes if profiles.load(n.box).is_windows]


def pytest_generate_tests(metafunc):
    if "path" in metafunc.fixturenames:
        # Without --k4w-config the collection hook (conftest.py) stops with a usage error.
        cfg_file = metafunc.config.getoption("--k4w-config")
        cfg = config_mod.load(cfg_file) if cfg_file else None
        backend = cfg.network.backend if cfg else "host-gw"
        windows_boxes = {n.box for n in _windows_nodes(cfg)} if cfg else set()
        metafunc.parametrize("path", matrix.pytest_params(backend, windows_boxes))
    if "windows_box" in metafunc.fixturenames:
        # The Windows boxes of cluster.yml; a cluster without one reports the check as not
        # applicable, never as passed.
        cfg_file = metafunc.config.getoption("--k4w-config")
        boxes = sorted({n.box for n in _windows_nodes(config_mod.load(cfg_file))}) if cfg_file else []
        params = [pytest.param(box, id=box) for box in boxes] or [pytest.param(None, id="none", marks=pytest.mark.k4w_deselect(
            "cluster.yml has no Windows node"))]
        metafunc.parametrize("windows_box", params)


# ------------------------------------------------------------------ workloads


def _wait_pod(kubectl, name: str, timeout: int) -> dict:
    def check():
        pod = kubectl.get("pod", "-n", wl.NAMESPACE, name)
        return pod_ready(pod), (pod if pod_ready(pod) else pod_state(pod))

    return wait_for(f"pod {wl.NAMESPACE}/{name} to be ready", check, timeout)


def _wait_pods(kubectl, namespace: str, selector: str, timeout: int, what: str) -> dict:
    def check():
        pods = kubectl.items("pods", "-n", namespace, "-l", selector)
        ready = [p for p in pods if pod_ready(p)]
        return bool(ready), (ready[0] if ready else "; ".join(pod_state(p) for p in pods) or "no pod yet")

    return wait_for(what, check, timeout)


def _wait_namespace_gone(kubectl) -> None:
    def check():
        proc = kubectl.run("get", "namespace", wl.NAMESPACE, "--ignore-not-found", "-o", "name", check=False)
        return proc.returncode == 0 and not proc.stdout.strip(), proc.stdout.strip() or proc.stderr.strip()

    wait_for(f"namespace {wl.NAMESPACE} of an earlier run to finish deleting", check, CLEANUP_TIMEOUT)


def _node_ip(cfg, name: str) -> str:
    for node in cfg.nodes:
        if node.name == name:
            return str(node.ip)
    raise AssertionError(f"pod runs on node {name}, which is not in cluster.yml")


@pytest.fixture(scope="session")
def endpoints(kubectl, cluster_cfg, k4w, os_label, proxy):
    windows_nodes = _windows_nodes(cluster_cfg)
    demo = wl.read_demo(k4w.out / "manifests") if windows_nodes else None
    windows_image = profiles.load(windows_nodes[0].box).data.images.servercore if windows_nodes else None
    linux_nodes = [n for n in cluster_cfg.nodes if not profiles.load(n.box).is_windows]
    linux_node = next((n for n in linux_nodes if n.role == "worker"), cluster_cfg.master)

    volume_check = wl.read_volume_check(k4w.out / "manifests") if windows_nodes else []

    _wait_namespace_gone(kubectl)
    if demo:
        # The demo's finished volume-check Pod: apply cannot change a Pod's spec (a box with another
        # Nano Server image), so it goes first; the spec runs its own copy in its namespace.
        kubectl.run("delete", "pod", "-n", demo.namespace, wl.VOLUME_CHECK, "--ignore-not-found", check=False)
        kubectl.apply_file(demo.manifest)  # idempotent: cluster-up deployed it already
    kubectl.apply(wl.objects(os_label, windows_image, demo, volume_check))
    try:
        ep = wl.Endpoints(domain=cluster_cfg.cluster.domain, demo=demo)
        ep.linux_node = (linux_node.name, str(linux_node.ip))
        ep.external_url = wl.outside_url(k4w.external_url, proxy.http, proxy.https, matrix.DEFAULT_EXTERNAL_URL)
        _wait_pod(kubectl, wl.LINUX_CLIENT, LINUX_POD_TIMEOUT)
        ep.linux_pod_ip = _wait_pod(kubectl, wl.LINUX_WEB, LINUX_POD_TIMEOUT)["status"]["podIP"]
        ep.linux_svc_ip = kubectl.get("service", "-n", wl.NAMESPACE, wl.LINUX_WEB_SERVICE)["spec"]["clusterIP"]
        ep.pods["linux-pod"] = (wl.NAMESPACE, wl.LINUX_CLIENT, "linux")
        if demo:
            _wait_pod(kubectl, wl.WIN_CLIENT, WINDOWS_POD_TIMEOUT)
            ep.pods["win-pod"] = (wl.NAMESPACE, wl.WIN_CLIENT, "windows")
            selector = ",".join(f"{k}={v}" for k, v in demo.selector.items())
            demo_pod = _wait_pods(kubectl, demo.namespace, selector, WINDOWS_POD_TIMEOUT, f"a ready pod of the demo {demo.name}")
            ep.win_pod_ip = demo_pod["status"]["podIP"]
            ep.win_node = (demo_pod["spec"]["nodeName"], _node_ip(cluster_cfg, demo_pod["spec"]["nodeName"]))
            service = kubectl.get("service", "-n", demo.namespace, demo.name)
            ep.win_svc_ip = service["spec"]["clusterIP"]
            ep.node_port = int(service["spec"]["ports"][0]["nodePort"])
            node_url = k4w.node_urls.get(ep.win_node[0])
            ep.win_node_management_ip = urllib.parse.urlsplit(node_url).hostname if node_url else None
        yield ep
    finally:
        if demo:
            kubectl.run("delete", "service", "-n", demo.namespace, wl.WIN_PODS, "--ignore-not-found", check=False)
        kubectl.run("delete", "namespace", wl.NAMESPACE, "--ignore-not-found", timeout=CLEANUP_TIMEOUT, check=False)


# ------------------------------------------------------------------ pod volumes


def _finished(kubectl, namespace: str, name: str, timeout: int) -> dict:
    def check():
        pod = kubectl.get("pod", "-n", namespace, name)
        done = pod.get("status", {}).get("phase") in ("Succeeded", "Failed")
        return done, (pod if done else pod_state(pod))

    return wait_for(f"pod {namespace}/{name} to finish", check, timeout)


@pytest.mark.k4w_check("pod_volumes")
def test_a_nano_server_pod_uses_its_token_configmap_and_emptydir(windows_box, endpoints, kubectl):
    """Nano Server runs as ContainerUser, which opens its mounts with its own identity: a node
    folder ACL that admits only SYSTEM and Administrators denies it every volume. (One pod for the
    cluster: k4w.derive.cluster refuses Windows nodes with different Nano Server images.)"""
    pod = _finished(kubectl, wl.NAMESPACE, wl.VOLUME_CHECK, WINDOWS_POD_TIMEOUT)
    log = kubectl.run("logs", "-n", wl.NAMESPACE, wl.VOLUME_CHECK, check=False).stdout.strip()
    assert pod["status"]["phase"] == "Succeeded", (
        f"{wl.VOLUME_CHECK} on {pod['spec'].get('nodeName')} failed ({pod_state(pod)}); its log, the step denied last:\n{log}\n"
        "The node's C:\\var\\lib\\kubelet\\pods must grant ContainerUser, S-1-5-93-2-2 (protect-node-folders.ps1)")
    assert "ContainerUser used every volume" in log, log


# ------------------------------------------------------------------ the matrix


def _probe_for(path, endpoints, kubectl, k4w):
    """A callable (url, dns_name) -> (answered, detail) that runs at the row's source."""
    if path.source in ("win-pod", "linux-pod"):
        namespace, pod, os_name = endpoints.pods[path.source]
        return lambda url, dns: probes.from_pod(kubectl, namespace, pod, os_name, url, dns)
    if path.source == "external":
        return lambda url, dns: probes.from_here(url)
    if path.source == "win-node":
        node = endpoints.win_node[0]
        if node not in k4w.node_urls:
            pytest.fail(f"no connection for node {node}: pass --k4w-node-url {node}=winrm://... (invoke cluster-test does)")
        host = testinfra.get_host(k4w.node_urls[node])
        return lambda url, dns: probes.from_windows_host(host, url)
    raise AssertionError(f"unknown source {path.source}")


@pytest.mark.k4w_check("connectivity")
def test_path(path, endpoints, kubectl, k4w):
    url, dns_name = endpoints.target(path.target, path.way)
    if path.closed:
        namespace, pod, os_name = endpoints.pods[path.source]
        host, port = url.removeprefix("tcp://").rsplit(":", 1)
        probes.never_connects(lambda: probes.tcp_from_pod(kubectl, namespace, pod, os_name, host, int(port)),
                              f"{path.id} [{path.claim}] {url}")
        return
    probe = _probe_for(path, endpoints, kubectl, k4w)
    probes.until_answered(lambda: probe(url, dns_name), f"{path.id} [{path.claim}] {url}")
