"""The workloads the cluster spec creates (workloads.py): the demo read from the rendered
manifest, the test pods and services, and the URL every connectivity-matrix row probes."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from k4w.model import config, profiles
from k4w import render
from k4w.derive.cluster import Cluster
from k4w.infra.errors import K4wError
from k4w.infra.sources import REPO_ROOT as ROOT
from k4w.verify import matrix, workloads as wl
from tests.helpers import venv_tool

WINDOWS = profiles.load("windows-1803")


def test_demo_is_read_from_the_rendered_manifest(tmp_path):
    render.render(Cluster.load(ROOT / "cluster.yml"), tmp_path)
    demo = wl.read_demo(tmp_path / "manifests")
    assert (demo.name, demo.namespace, demo.port) == ("win-webserver", "default", 80)
    assert demo.selector == {"app": "win-webserver"}


def test_objects_pin_os_and_only_add_windows_pods_when_there_is_windows():
    demo = wl.Demo(Path("x"), "win-webserver", "default", {"app": "win-webserver"}, 80)
    objs = wl.objects("beta.kubernetes.io/os", WINDOWS.data.images.servercore, demo)
    pods = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Pod"}
    assert pods[wl.WIN_CLIENT]["spec"]["nodeSelector"] == {"beta.kubernetes.io/os": "windows"}
    assert pods[wl.WIN_CLIENT]["spec"]["containers"][0]["image"] == "mcr.microsoft.com/windows/servercore:1803"
    assert pods[wl.LINUX_WEB]["spec"]["nodeSelector"] == {"beta.kubernetes.io/os": "linux"}
    headless = [o for o in objs if o["kind"] == "Service" and o["spec"].get("clusterIP") == "None"]
    assert {(s["metadata"]["namespace"], s["metadata"]["name"]) for s in headless} == {
        (wl.NAMESPACE, wl.LINUX_WEB_PODS), ("default", wl.WIN_PODS)}
    linux_only = wl.objects("kubernetes.io/os", None, None)
    assert not [o for o in linux_only if "win" in o["metadata"]["name"]]


def test_objects_are_valid_kubernetes(tmp_path):
    kv = venv_tool("kubernetes-validate")
    demo = wl.Demo(Path("x"), "win-webserver", "default", {"app": "win-webserver"}, 80)
    path = tmp_path / "objects.yaml"
    path.write_text("\n---\n".join(json.dumps(o) for o in wl.objects("kubernetes.io/os", "img", demo)))
    proc = subprocess.run([kv, "--strict", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_matrix_target_resolves_to_a_url():
    demo = wl.Demo(Path("x"), "win-webserver", "default", {"app": "win-webserver"}, 80)
    ep = wl.Endpoints(domain="cluster.local", demo=demo, win_pod_ip="10.244.2.3", win_svc_ip="10.100.1.1", node_port=30080,
                      linux_pod_ip="10.244.1.4", linux_svc_ip="10.100.2.2", win_node=("worker-win", "192.168.250.21"),
                      linux_node=("worker-linux", "192.168.250.11"), external_url="http://connectivity-check.ubuntu.com/",
                      win_node_management_ip="172.20.48.7")
    for row in matrix.MATRIX:
        url, name = ep.target(row.target, row.way)
        assert url.startswith("tcp://" if row.closed else "http://") and "None" not in url, row.id
        assert (name is not None) == (row.way == "dns"), row.id
    assert ep.target("win-pod", "dns") == ("http://k4w-test-win-pods.default.svc.cluster.local:80/", "k4w-test-win-pods.default.svc.cluster.local")
    assert ep.target("same-win-node", "nodeport")[0] == "http://192.168.250.21:30080/"
    assert ep.target("win-node", "winrm-https") == ("tcp://192.168.250.21:5986", None)
    assert ep.target("win-node-mgmt", "winrm-http") == ("tcp://172.20.48.7:5985", None)


def test_the_management_address_must_be_known_for_its_winrm_rows():
    ep = wl.Endpoints(domain="cluster.local", demo=None, win_node=("worker-win", "192.168.250.21"))
    with pytest.raises(K4wError, match="no address for win-node-mgmt.*--k4w-node-url"):
        ep.target("win-node-mgmt", "winrm-https")


def test_outside_url_prefers_explicit_then_proxy_without_credentials():
    assert wl.outside_url("http://x/", "http://p:3128", None, "d") == "http://x/"
    assert wl.outside_url(None, "http://bob:pw@proxy.corp:3128", None, "d") == "http://proxy.corp:3128/"
    assert wl.outside_url(None, None, "https://proxy.corp:8443", "d") == "http://proxy.corp:8443/"
    assert wl.outside_url(None, None, None, matrix.DEFAULT_EXTERNAL_URL) == matrix.DEFAULT_EXTERNAL_URL


def test_the_demos_nano_server_volume_check_runs_again_in_the_spec_namespace(tmp_path):
    render.render(Cluster.load(ROOT / "cluster.yml"), tmp_path)
    check = wl.read_volume_check(tmp_path / "manifests")
    assert [(o["kind"], o["metadata"]["name"], o["metadata"]["namespace"]) for o in check] == [
        ("ConfigMap", wl.VOLUME_CHECK, wl.NAMESPACE), ("Pod", wl.VOLUME_CHECK, wl.NAMESPACE)]
    pod = check[1]
    container = pod["spec"]["containers"][0]
    # Nano Server, the box's pre-pulled image: its default user is ContainerUser (no runAsUserName).
    assert container["image"] == WINDOWS.data.images.nanoserver
    assert "securityContext" not in pod["spec"] and "securityContext" not in container
    assert pod["spec"]["restartPolicy"] == "Never"
    assert {v["name"]: sorted(set(v) - {"name"}) for v in pod["spec"]["volumes"]} == {"config": ["configMap"], "scratch": ["emptyDir"]}
    script = container["command"][-1]
    assert "serviceaccount\\token >NUL" in script   # read, never printed
    objs = wl.objects("kubernetes.io/os", "img", None, check)
    assert [o for o in objs if o["metadata"]["name"] == wl.VOLUME_CHECK] == check
    assert not [o for o in wl.objects("kubernetes.io/os", None, None, check) if o["metadata"]["name"] == wl.VOLUME_CHECK]
