"""What the specs expect, derived from profiles and cluster.yml, and the workloads they create."""

from __future__ import annotations

import glob
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from k4w import profiles
from tests.helpers import venv_tool
from k4w.sources import REPO_ROOT as ROOT
from k4w.errors import K4wError
from k4w.verify import expect, matrix, workloads as wl
from k4w.verify.kubectl import pod_ready, pod_state, wait_for

UBUNTU = profiles.load("ubuntu-1604")
WINDOWS = profiles.load("windows-1803")


def test_release_document_is_the_profiles_components():
    doc = expect.release_document(WINDOWS)
    assert doc["box"] == "windows-1803"
    assert doc["components"] == {name: str(spec["version"]) for name, spec in WINDOWS.data.components.items()}
    assert doc["components"]["docker"] == WINDOWS.data.components.docker.version


@pytest.mark.parametrize("name", profiles.available())
def test_kubernetes_components_agree_with_kubernetes_version(name):
    # The specs compare every Kubernetes binary with kubernetes.version; a profile whose
    # download components pin another version would build a box no spec can pass.
    data = profiles.load(name).data
    pinned = {c: str(spec["version"]) for c, spec in (data.get("components") or {}).items()
              if c in ("kubernetes", "kubeadm", "kubelet", "kubectl")}
    assert set(pinned.values()) <= {str(data.kubernetes.version)}, pinned


def test_missing_component_is_named():
    with pytest.raises(K4wError, match=r"components\.docker\.cgroup_driver is not set"):
        expect.component(WINDOWS, "docker", "cgroup_driver")


@pytest.mark.parametrize("actual, pinned, ok", [
    ("17.09.0-ce", "17.09.0-ce", True),
    ("17.03.2-ce", "17.03.2", True),
    ("17.06.2-ee-16", "17.06.2", True),
    ("17.03.20", "17.03.2", False),
    ("17.03.1-ce", "17.03.2", False),
    ("v1.11.10", "1.11.10", True),
])
def test_version_matches(actual, pinned, ok):
    assert expect.version_matches(actual, pinned) is ok


@pytest.mark.parametrize("output, version", [
    ("Kubernetes v1.11.10", "1.11.10"),
    ("v1.11.10\n", "1.11.10"),
    ('Client Version: version.Info{Major:"1", Minor:"11", GitVersion:"v1.11.10", GoVersion:"go1.10.8"}', "1.11.10"),
    ("I1121 flanneld.go:1] v0.11.0", "0.11.0"),
    ("command not found", None),
])
def test_reported_version(output, version):
    assert expect.reported_version(output) == version


def test_insecure_key_is_the_one_vagrant_ships():
    shipped = glob.glob("/usr/share/rubygems-integration/all/gems/vagrant-*/keys/vagrant.pub") + glob.glob(
        "/opt/vagrant/embedded/gems/gems/vagrant-*/keys/vagrant.pub")
    if not shipped:
        pytest.fail("Vagrant is not installed (its keys/vagrant.pub is the reference): apt-get install -y vagrant")
    assert expect.authorized_keys_have(Path(shipped[0]).read_text())
    assert expect.authorized_keys_have('no-pty ' + expect.VAGRANT_INSECURE_KEY + " vagrant insecure public key\n")
    assert not expect.authorized_keys_have("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK vagrant\n")


def test_env_assignments_as_systemd_and_etc_environment_write_them():
    text = 'PATH="/usr/bin"\nHTTP_PROXY="http://p:3128"\n# comment\nno_proxy=localhost,10.96.0.0/12\n'
    assert expect.parse_env_assignments(text) == {"PATH": "/usr/bin", "HTTP_PROXY": "http://p:3128", "no_proxy": "localhost,10.96.0.0/12"}


# ------------------------------------------------------------------ workloads


def test_demo_is_read_from_the_rendered_manifest(tmp_path):
    from k4w import render
    from k4w.cluster_model import Cluster

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
                      linux_node=("worker-linux", "192.168.250.11"), external_url="http://connectivity-check.ubuntu.com/")
    for row in matrix.MATRIX:
        url, name = ep.target(row.target, row.way)
        assert url.startswith("http://") and "None" not in url, row.id
        assert (name is not None) == (row.way == "dns"), row.id
    assert ep.target("win-pod", "dns") == ("http://k4w-test-win-pods.default.svc.cluster.local:80/", "k4w-test-win-pods.default.svc.cluster.local")
    assert ep.target("same-win-node", "nodeport")[0] == "http://192.168.250.21:30080/"


def test_outside_url_prefers_explicit_then_proxy_without_credentials():
    assert wl.outside_url("http://x/", "http://p:3128", None, "d") == "http://x/"
    assert wl.outside_url(None, "http://bob:pw@proxy.corp:3128", None, "d") == "http://proxy.corp:3128/"
    assert wl.outside_url(None, None, "https://proxy.corp:8443", "d") == "http://proxy.corp:8443/"
    assert wl.outside_url(None, None, None, matrix.DEFAULT_EXTERNAL_URL) == matrix.DEFAULT_EXTERNAL_URL


# ------------------------------------------------------------------ waiting


def test_wait_for_times_out_with_the_last_state():
    now = [0.0]

    def sleep(s):
        now[0] += s

    with pytest.raises(TimeoutError, match="waiting for pod x to be ready; last seen: x: Pending; x waiting ErrImagePull"):
        wait_for(lambda: (False, "x: Pending; x waiting ErrImagePull"), 30, "pod x to be ready", clock=lambda: now[0], sleep=sleep)
    assert wait_for(lambda: (True, "done"), 30, "x", clock=lambda: 0, sleep=sleep) == "done"


def test_pod_state_explains_a_pod_that_is_not_ready():
    pod = {"metadata": {"name": "win-client"}, "status": {"phase": "Pending", "containerStatuses": [
        {"name": "win-client", "state": {"waiting": {"reason": "ContainerCreating", "message": "HNS endpoint"}}}]}}
    assert not pod_ready(pod)
    assert pod_state(pod) == "win-client: Pending; win-client waiting ContainerCreating HNS endpoint"
