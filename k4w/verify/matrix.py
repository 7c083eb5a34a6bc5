"""The connectivity matrix: every network path a hybrid cluster must (or cannot) carry, as data.

Rows follow the checklist of ptylenda/kubernetes-for-windows@71843a4 README.md ("Known issues and
limitations" item 2) plus the documented Windows NodePort limitation. The cluster spec parametrizes one test per
row; a row whose known issue applies to this cluster is expected to fail (strict: if it ever
starts working, the run fails until the table is updated).

Endpoints (what k4w/verify/specs/test_cluster_connectivity.py resolves them to):
  win-pod        source: a Server Core client pod the spec creates (PowerShell probes);
                 target: the demo Windows web server pod (build/manifests/demo-win-webserver.yaml)
  linux-pod      source: a busybox client pod; target: an nginx pod (both created by the spec)
  win-svc        the demo's Service (ClusterIP of the NodePort service)
  linux-svc      a ClusterIP Service in front of the Linux nginx pod
  win-node       a Windows node's cluster IP (NodePort); same-win-node: the node hosting the pod
  win-node-mgmt  that node's management IP (the address Vagrant and cluster-test use for WinRM)
  linux-node     a Linux node's cluster IP (NodePort)
  external       outside the cluster: as a source, the machine running the spec (the Hyper-V
                 host); as a target, --k4w-external-url or DEFAULT_EXTERNAL_URL / the proxy
Ways:
  ip       target addressed by IP
  dns      target addressed by its cluster DNS name (pods: a headless Service's name)
  nodeport the Service's NodePort on the node's cluster IP
  nat      outbound to an address outside every cluster CIDR (needs outbound NAT)
  winrm-http, winrm-https
           a TCP connection to WinRM's HTTP (5985) or HTTPS (5986) port

A row marked `closed` is the opposite claim: the path must NOT connect (nothing a pod can reach
offers a login, DESIGN "Security is part of it works"). It passes only when every attempt is
refused or dropped, and fails the moment one connects.
"""

from __future__ import annotations

from dataclasses import dataclass

SOURCES = ("win-pod", "linux-pod", "external", "win-node")
TARGETS = ("win-pod", "linux-pod", "win-svc", "linux-svc", "win-node", "win-node-mgmt", "linux-node", "same-win-node", "external")
WAYS = ("ip", "dns", "nodeport", "nat", "winrm-http", "winrm-https")
# WinRM's default listener ports (Microsoft, "Installation and configuration for Windows Remote
# Management": HTTP 5985, HTTPS 5986).
WINRM_PORTS = {"winrm-http": 5985, "winrm-https": 5986}

# Outbound target when cluster.yml has no proxy: Ubuntu's network connectivity check, a plain
# HTTP endpoint kept up for NetworkManager (/etc/NetworkManager/conf.d/20-connectivity-ubuntu.conf).
# With a proxy, the proxy itself is the outside address pods must reach.
DEFAULT_EXTERNAL_URL = "http://connectivity-check.ubuntu.com/"

SEED_CHECKLIST = "seed 000 (kubernetes-for-windows README), Known issues item 2"


@dataclass(frozen=True)
class KnownIssue:
    """A path the platform cannot carry, with why and where that is documented.

    It applies when the cluster matches every given condition (None = any).
    """

    reason: str
    source: str
    backends: tuple[str, ...] | None = None
    windows_boxes: tuple[str, ...] | None = None

    def applies(self, backend: str, windows_boxes: set[str]) -> bool:
        if self.backends is not None and backend not in self.backends:
            return False
        if self.windows_boxes is not None and not windows_boxes & set(self.windows_boxes):
            return False
        return True

    def describe(self) -> str:
        return f"{self.reason} (source: {self.source})"


@dataclass(frozen=True)
class Path:
    source: str
    target: str
    way: str
    claim: str  # what a pass proves, in the words of the checklist it comes from
    known_issue: KnownIssue | None = None
    closed: bool = False  # the path must not connect (see the module docstring)

    def __post_init__(self):
        if self.source not in SOURCES or self.target not in TARGETS or self.way not in WAYS:
            raise ValueError(f"unknown endpoint or way in {self}")

    @property
    def id(self) -> str:
        return f"{self.source}->{self.target}:{self.way}"

    @property
    def needs_windows(self) -> bool:
        return "win" in self.source or "win" in self.target

    def expected_failure(self, backend: str, windows_boxes: set[str]) -> KnownIssue | None:
        if self.known_issue and self.known_issue.applies(backend, windows_boxes):
            return self.known_issue
        return None


WINDOWS_OUTBOUND_NAT = KnownIssue(
    reason="Windows Server 1803 HNS with Flannel host-gw cannot give pods outbound NAT without "
    "losing pod-to-pod traffic, so the CNI config leaves it off",
    source=f"{SEED_CHECKLIST}: the one unchecked box",
    backends=("host-gw",),
    windows_boxes=("windows-1803",),
)
NODEPORT_FROM_HOSTING_WINDOWS_NODE = KnownIssue(
    reason="a NodePort is not reachable from the Windows node that hosts the backing pod",
    source="REFERENCE.md 'Flannel and Windows networking facts' (documented Windows limitation)",
)

MATRIX: tuple[Path, ...] = (
    Path("win-pod", "win-pod", "ip", "Pod-to-pod between Windows pods using IP"),
    Path("win-pod", "win-pod", "dns", "Pod-to-pod between Windows pods using DNS"),
    Path("win-pod", "linux-pod", "ip", "Pod-to-pod between Windows and Linux pods using IP"),
    Path("win-pod", "linux-pod", "dns", "Pod-to-pod between Windows and Linux pods using DNS"),
    Path("linux-pod", "win-pod", "ip", "Pod-to-pod between Windows and Linux pods using IP"),
    Path("linux-pod", "win-pod", "dns", "Pod-to-pod between Windows and Linux pods using DNS"),
    Path("linux-pod", "linux-pod", "ip", "Pod-to-pod between Linux pods using IP"),
    Path("linux-pod", "linux-pod", "dns", "Pod-to-pod between Linux pods using DNS"),
    Path("linux-pod", "win-svc", "ip", "Pod-to-service between Linux pod and Windows service using IP"),
    Path("linux-pod", "win-svc", "dns", "Pod-to-service between Linux pod and Windows service using DNS"),
    Path("win-pod", "linux-svc", "ip", "Pod-to-service between Windows pod and Linux service using IP"),
    Path("win-pod", "linux-svc", "dns", "Pod-to-service between Windows pod and Linux service using DNS"),
    Path("external", "win-node", "nodeport", "External communication to NodePort service via Windows node"),
    Path("external", "linux-node", "nodeport", "External communication to NodePort service via Linux node"),
    Path("linux-pod", "external", "nat", "Communication with external IPs (outbound NAT) from Linux pods"),
    Path(
        "win-pod",
        "external",
        "nat",
        "Communication with external IPs (outbound NAT) from Windows pods",
        known_issue=WINDOWS_OUTBOUND_NAT,
    ),
    Path(
        "win-node",
        "same-win-node",
        "nodeport",
        "NodePort service from the Windows node that hosts its pod",
        known_issue=NODEPORT_FROM_HOSTING_WINDOWS_NODE,
    ),
    # Pods are masqueraded to their node's address, so "from a pod" also means "from any node":
    # WinRM listens for the host side only (the management NIC, from its default gateway, which
    # on the Default Switch is the Hyper-V host; guest/windows/node/winrm-scope.ps1).
    *(
        Path(source, target, way, f"WinRM ({WINRM_PORTS[way]}) of a Windows node is closed to pods: nothing a pod can reach offers a login",
             closed=True)
        for source in ("linux-pod", "win-pod")
        for target in ("win-node", "win-node-mgmt")
        for way in ("winrm-http", "winrm-https")
    ),
)


def pytest_params(backend: str, windows_boxes: set[str]) -> list:
    """One pytest.param per row, id like `win-pod->linux-pod:dns`.

    - a row the cluster cannot have (no Windows node) is deselected with that reason;
    - a row with an applicable known issue is xfail(strict=True, raises=PathUnreachable): it
      must fail by getting no answer; an answer (XPASS) or a broken probe fails the run.
    """
    import pytest  # only the spec needs this; the package itself does not depend on pytest

    from .probes import PathUnreachable

    params = []
    for row in MATRIX:
        marks = []
        if row.needs_windows and not windows_boxes:
            marks.append(pytest.mark.k4w_deselect("cluster.yml has no Windows node"))
        issue = row.expected_failure(backend, windows_boxes)
        if issue:
            marks.append(pytest.mark.xfail(strict=True, raises=PathUnreachable, reason=issue.describe()))
        params.append(pytest.param(row, id=row.id, marks=marks))
    return params
