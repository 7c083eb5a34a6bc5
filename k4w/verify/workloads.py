"""The pods and services the cluster spec needs, and where each matrix endpoint lives.

The Windows server is the demo from build/manifests (the user's own smoke test); the spec
adds client pods and Linux servers in its own namespace, plus one headless Service beside
the demo, and deletes all of them afterwards. The demo's Nano Server volume check (a Pod and its
ConfigMap) runs again in that namespace, so every run tests the node as it is now.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from k4w.derive import node_marks
from k4w.infra.errors import K4wError
from .matrix import WINRM_PORTS

NAMESPACE = "k4w-test"
# Rendered from templates/manifests/demo-win-webserver.yaml.j2 (docs/internals.md template table).
DEMO_MANIFEST = "demo-win-webserver.yaml"

# busybox 1.28: the image the Kubernetes "Debugging DNS Resolution" guide uses, because
# nslookup in later busybox releases misreports cluster DNS answers.
BUSYBOX_IMAGE = "busybox:1.28"
# nginx of the Kubernetes 1.11 era; any build answers HTTP on port 80.
NGINX_IMAGE = "nginx:1.15-alpine"
HTTP_PORT = 80

LINUX_CLIENT = "linux-client"
LINUX_WEB = "linux-web"
LINUX_WEB_SERVICE = "linux-web"  # ClusterIP: pod -> service
LINUX_WEB_PODS = "linux-web-pods"  # headless: its DNS name resolves straight to the pod
WIN_CLIENT = "win-client"
WIN_PODS = "k4w-test-win-pods"  # headless Service beside the demo, same selector
# The demo's Nano Server pod (ContainerUser) that reads its token and ConfigMap and writes its emptyDir.
VOLUME_CHECK = "win-nanoserver-volumes"
SPEC_LABEL = {"app.kubernetes.io/managed-by": "k4w-cluster-test"}

# kubeadm 1.11 taints the master NoSchedule; tolerating it lets the Linux pods run on a
# cluster whose only Linux node is the master.
MASTER_TOLERATION = {"key": "node-role.kubernetes.io/master", "operator": "Exists", "effect": "NoSchedule"}
# k4w's Windows nodes register with os=windows:NoSchedule (k4w/derive/node_marks.py): a Windows pod tolerates it.
WINDOWS_TOLERATION = dict(node_marks.WINDOWS_TOLERATION)


@dataclass(frozen=True)
class Demo:
    """The demo's NodePort Service, as written in the rendered manifest."""

    manifest: Path
    name: str
    namespace: str
    selector: dict
    port: int


def read_demo(manifests: Path) -> Demo:
    path = manifests / DEMO_MANIFEST
    if not path.is_file():
        raise K4wError(f"no demo manifest at {path}: run `invoke render`")
    for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
        if doc and doc.get("kind") == "Service" and doc.get("spec", {}).get("type") == "NodePort":
            meta, spec = doc["metadata"], doc["spec"]
            return Demo(path, meta["name"], meta.get("namespace", "default"), dict(spec["selector"]), int(spec["ports"][0]["port"]))
    raise K4wError(f"{path}: no NodePort Service; the cluster spec reaches the demo through it")


def read_volume_check(manifests: Path) -> list[dict]:
    """The demo's volume check, its ConfigMap and Pod, moved into the spec's namespace."""
    path = manifests / DEMO_MANIFEST
    if not path.is_file():
        raise K4wError(f"no demo manifest at {path}: run `invoke render`")
    found = [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8"))
             if doc and doc.get("metadata", {}).get("name") == VOLUME_CHECK and doc.get("kind") in ("ConfigMap", "Pod")]
    if sorted(doc["kind"] for doc in found) != ["ConfigMap", "Pod"]:
        raise K4wError(f"{path}: no ConfigMap and Pod {VOLUME_CHECK}; the cluster spec runs that volume check")
    for doc in found:
        doc["metadata"] = {**doc["metadata"], "namespace": NAMESPACE,
                           "labels": {**(doc["metadata"].get("labels") or {}), **SPEC_LABEL}}
    return sorted(found, key=lambda doc: doc["kind"])   # the ConfigMap before the Pod that mounts it


def _pod(name: str, os_label: str, os_name: str, container: dict, labels: dict | None = None, **spec) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {**SPEC_LABEL, **(labels or {})}},
        "spec": {
            "nodeSelector": {os_label: os_name},
            "terminationGracePeriodSeconds": 5,
            "containers": [{"name": name, "imagePullPolicy": "IfNotPresent", **container}],
            **spec,
        },
    }


def _service(name: str, namespace: str, selector: dict, port: int, headless: bool = False) -> dict:
    spec = {"selector": selector, "ports": [{"name": "http", "port": port, "targetPort": port, "protocol": "TCP"}]}
    if headless:
        spec["clusterIP"] = "None"
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(SPEC_LABEL)},
        "spec": spec,
    }


def objects(os_label: str, windows_image: str | None, demo: Demo | None, volume_check: list[dict] = ()) -> list[dict]:
    """Everything the spec creates. Windows objects only when the cluster has a Windows node."""
    web_labels = {"k4w-test": LINUX_WEB}
    objs = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE, "labels": dict(SPEC_LABEL)}},
        _pod(
            LINUX_CLIENT,
            os_label,
            "linux",
            {"image": BUSYBOX_IMAGE, "command": ["sleep", "86400"]},
            tolerations=[MASTER_TOLERATION],
        ),
        _pod(
            LINUX_WEB,
            os_label,
            "linux",
            {
                "image": NGINX_IMAGE,
                "ports": [{"containerPort": HTTP_PORT}],
                "readinessProbe": {"httpGet": {"path": "/", "port": HTTP_PORT}},
            },
            labels=web_labels,
            tolerations=[MASTER_TOLERATION],
        ),
        _service(LINUX_WEB_SERVICE, NAMESPACE, web_labels, HTTP_PORT),
        _service(LINUX_WEB_PODS, NAMESPACE, web_labels, HTTP_PORT, headless=True),
    ]
    if windows_image:
        objs.append(
            _pod(
                WIN_CLIENT,
                os_label,
                "windows",
                # Kubernetes expands $(NAME) in commands; this loop has none. It only keeps the
                # container alive for `kubectl exec`.
                {"image": windows_image, "command": ["powershell.exe", "-NoProfile", "-Command", "while ($true) { Start-Sleep -Seconds 3600 }"]},
                tolerations=[WINDOWS_TOLERATION],
            )
        )
    if demo:
        objs.append(_service(WIN_PODS, demo.namespace, demo.selector, demo.port, headless=True))
    if windows_image:
        objs += list(volume_check)
    return objs


def outside_url(explicit: str | None, proxy_http: str | None, proxy_https: str | None, default: str) -> str:
    """Where the outbound (NAT) rows go: the given URL, else the proxy itself, else the default.

    Behind a corporate proxy, pods cannot reach the internet directly, but the proxy is an
    address outside every cluster CIDR that must answer. Its credentials are never used.
    """
    if explicit:
        return explicit
    for proxy in (proxy_http, proxy_https):
        if proxy:
            parts = urllib.parse.urlsplit(proxy)
            return f"http://{parts.hostname}:{parts.port}/"
    return default


@dataclass
class Endpoints:
    """Resolved addresses of every matrix endpoint in the running cluster."""

    domain: str
    demo: Demo | None
    win_pod_ip: str | None = None
    win_svc_ip: str | None = None
    node_port: int | None = None
    linux_pod_ip: str | None = None
    linux_svc_ip: str | None = None
    win_node: tuple[str, str] | None = None  # (name, cluster IP) of the node hosting the demo pod
    win_node_management_ip: str | None = None  # that node's management NIC address (its WinRM URL's host)
    linux_node: tuple[str, str] | None = None
    external_url: str = ""
    pods: dict = field(default_factory=dict)  # source -> (namespace, pod, os)

    def _dns(self, name: str, namespace: str) -> str:
        return f"{name}.{namespace}.svc.{self.domain}"

    def target(self, target: str, way: str) -> tuple[str, str | None]:
        """(URL, DNS name or None) for a matrix target reached a given way."""
        def http(host: str, port: int) -> str:
            return f"http://{host}:{port}/"

        demo_port = self.demo.port if self.demo else HTTP_PORT
        table = {
            ("win-pod", "ip"): lambda: (http(self.win_pod_ip, demo_port), None),
            ("win-pod", "dns"): lambda: self._by_name(WIN_PODS, self.demo.namespace, demo_port),
            ("linux-pod", "ip"): lambda: (http(self.linux_pod_ip, HTTP_PORT), None),
            ("linux-pod", "dns"): lambda: self._by_name(LINUX_WEB_PODS, NAMESPACE, HTTP_PORT),
            ("win-svc", "ip"): lambda: (http(self.win_svc_ip, demo_port), None),
            ("win-svc", "dns"): lambda: self._by_name(self.demo.name, self.demo.namespace, demo_port),
            ("linux-svc", "ip"): lambda: (http(self.linux_svc_ip, HTTP_PORT), None),
            ("linux-svc", "dns"): lambda: self._by_name(LINUX_WEB_SERVICE, NAMESPACE, HTTP_PORT),
            ("win-node", "nodeport"): lambda: (http(self.win_node[1], self.node_port), None),
            ("same-win-node", "nodeport"): lambda: (http(self.win_node[1], self.node_port), None),
            ("linux-node", "nodeport"): lambda: (http(self.linux_node[1], self.node_port), None),
            ("external", "nat"): lambda: (self.external_url, None),
            **{(target, way): (lambda target=target, way=way: (self._tcp(target, way), None))
               for target in ("win-node", "win-node-mgmt") for way in WINRM_PORTS},
        }
        if (target, way) not in table:
            raise K4wError(f"the matrix has no way to reach {target} by {way}")
        return table[(target, way)]()

    def _tcp(self, target: str, way: str) -> str:
        host = self.win_node[1] if target == "win-node" else self.win_node_management_ip
        if not host:
            raise K4wError(f"no address for {target}: the Windows node's management IP comes from its WinRM URL "
                           "(--k4w-node-url NODE=winrm://..., which invoke cluster-test passes)")
        return f"tcp://{host}:{WINRM_PORTS[way]}"

    def _by_name(self, name: str, namespace: str, port: int) -> tuple[str, str]:
        fqdn = self._dns(name, namespace)
        return f"http://{fqdn}:{port}/", fqdn
