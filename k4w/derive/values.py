"""Values derived once from the config, so every artifact agrees by construction.

The pod CIDR in kubeadm, Flannel's Network, the Windows CNI config and kube-proxy's
cluster-cidr all come from Network.pod_cidr; the kubelet's cluster-dns from dns_ip;
every NO_PROXY from Proxy.no_proxy; every proxy host:port, environment mapping and apt
proxy file from Proxy (k4w.derive.step_env hands them to the guest steps).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from k4w.model.config import PROXY_URL, Config, Node
from k4w.derive import registry

API_PORT = 6443  # kube-apiserver secure port, kubeadm default
# Microsoft's Flannel vxlan on Windows only works with VNI 4096 and UDP 4789 (kubernetes/website
# @014f73f, content/en/docs/setup/production-environment/windows/intro-windows-in-kubernetes.md,
# "CNI plugin limitations").
VXLAN_VNI = 4096
VXLAN_PORT = 4789


@dataclass(frozen=True)
class Network:
    pod_cidr: str
    service_cidr: str
    node_cidr: str
    node_prefixlen: int
    gateway: str
    dns_ip: str
    kubernetes_service_ip: str
    api_ip: str
    api_port: int
    cluster_domain: str
    backend: str
    flannel_netconf: dict
    vxlan_vni: int
    vxlan_port: int
    windows_network_name: str
    master: Node | None  # None for cluster.existing: the existing cluster's control plane is not a node here
    nodes: list[Node] = field(default_factory=list)


# First line of the apt proxy file (/etc/apt/apt.conf.d/90k4w-proxy), so a reader of the
# guest knows where the values come from.
APT_PROXY_HEADER = "// k4w: apt proxy from cluster.yml proxy.http / proxy.https"


@dataclass(frozen=True)
class ProxyServer:
    """One proxy URL of cluster.yml, in the parts that consumers take separately."""

    url: str
    host_port: str  # what WinHTTP, WinINet and the Windows answer file take: no scheme, no credentials
    user: str | None  # percent-encoded, as written in the URL
    password: str | None

    @classmethod
    def parse(cls, url: str) -> "ProxyServer":
        """Split a URL that passed k4w.model.config's validation (the one proxy URL grammar)."""
        m = PROXY_URL.fullmatch(url)
        if m is None:
            raise ValueError(f"not a proxy URL k4w.model.config accepts: {url!r}")
        return cls(url=url, host_port=f"{m['host']}:{m['port']}", user=m["user"], password=m["password"])


def proxy_env(http: str | None, https: str | None, no_proxy: str | None) -> dict[str, str]:
    """The variables every downloader understands, upper and lower case, only those set.

    Takes the values as strings so the Packer templates can pass references to their
    sensitive variables instead of URLs with credentials (k4w.derive.step_env).
    """
    values = {"HTTP_PROXY": http, "HTTPS_PROXY": https, "NO_PROXY": no_proxy}
    out: dict[str, str] = {}
    for key, value in values.items():
        if value:
            out[key] = value
            out[key.lower()] = value
    return out


def apt_proxy_conf(http: str | None, https: str | None) -> str:
    """The text of apt's proxy file for these proxy URLs (no final newline); '' without a proxy.

    The installer's late_command and provisioning step 01 write this same text, so a fresh
    box finds nothing to change.
    """
    if not (http or https):
        return ""
    lines = [APT_PROXY_HEADER]
    if http:
        lines.append(f'Acquire::http::Proxy "{http}";')
    if https:
        lines.append(f'Acquire::https::Proxy "{https}";')
    return "\n".join(lines)


@dataclass(frozen=True)
class Proxy:
    enabled: bool
    http: str | None
    https: str | None
    no_proxy: list[str]

    @property
    def no_proxy_str(self) -> str:
        return ",".join(self.no_proxy)

    @property
    def http_server(self) -> ProxyServer | None:
        return ProxyServer.parse(self.http) if self.http else None

    @property
    def https_server(self) -> ProxyServer | None:
        return ProxyServer.parse(self.https) if self.https else None

    @property
    def http_host_port(self) -> str | None:
        return self.http_server.host_port if self.http else None

    @property
    def https_host_port(self) -> str | None:
        return self.https_server.host_port if self.https else None

    @property
    def passwords(self) -> tuple[str, ...]:
        """The URLs' passwords as written (percent-encoded), for the redaction list."""
        return tuple(server.password for server in (self.http_server, self.https_server) if server and server.password)

    @property
    def has_credentials(self) -> bool:
        return any(server and server.user for server in (self.http_server, self.https_server))

    @property
    def file_mode(self) -> str:
        """Mode of the guest files that hold the proxy URLs (apt, systemd drop-ins): readable
        by root only when a URL carries a password (apt and systemd read them as root)."""
        return "0600" if self.has_credentials else "0644"

    @property
    def env(self) -> dict[str, str]:
        """The variables every downloader understands, upper and lower case, only those set."""
        return proxy_env(self.http, self.https, self.no_proxy_str if self.enabled else None)

    @property
    def apt_conf(self) -> str:
        return apt_proxy_conf(self.http, self.https)


def derive_network(cfg: Config) -> Network:
    net = cfg.network
    # kubeadm's convention: the API service takes the 1st address and CoreDNS/kube-dns the 10th.
    dns_ip = net.service_cidr.network_address + 10
    backend: dict = {"Type": net.backend}
    if net.backend == "vxlan":
        backend.update({"VNI": VXLAN_VNI, "Port": VXLAN_PORT})
    return Network(
        pod_cidr=str(net.pod_cidr),
        service_cidr=str(net.service_cidr),
        node_cidr=str(net.node_cidr),
        node_prefixlen=net.node_cidr.prefixlen,
        # Internal: this host's address on the switch (NetNat); External: the user's router.
        gateway=str(cfg.hyperv.cluster_gateway or next(net.node_cidr.hosts())),
        dns_ip=str(dns_ip),
        kubernetes_service_ip=str(net.service_cidr.network_address + 1),
        # An existing cluster's API server is its kubeconfig's, known only when cluster-up reads it.
        api_ip="" if cfg.joins_existing else str(cfg.master.ip),
        api_port=API_PORT,
        cluster_domain=cfg.cluster.domain,
        backend=net.backend,
        flannel_netconf={"Network": str(net.pod_cidr), "Backend": backend},
        vxlan_vni=VXLAN_VNI,
        vxlan_port=VXLAN_PORT,
        # Names Flannel for Windows expects for the HNS network it creates per backend.
        windows_network_name="cbr0" if net.backend == "host-gw" else "vxlan0",
        master=None if cfg.joins_existing else cfg.master,
        nodes=list(cfg.nodes),
    )


def derive_proxy(cfg: Config) -> Proxy:
    p = cfg.proxy
    enabled = bool(p.http or p.https)
    if not enabled:
        return Proxy(enabled=False, http=None, https=None, no_proxy=[])
    net = cfg.network
    # apt and Windows' WinHTTP do not understand CIDRs, Go and curl do: list both forms.
    entries = [
        "localhost",
        "127.0.0.1",
        *p.no_proxy,
        # A registry mirror that cannot be on the Internet (k4w.derive.registry.no_proxy_hosts): containerd
        # and Docker pull through the proxy their service environment names, except for these.
        *registry.no_proxy_hosts(cfg),
        str(net.node_cidr),
        str(net.pod_cidr),
        str(net.service_cidr),
        str(net.service_cidr.network_address + 1),
        *(str(n.ip) for n in cfg.nodes),
        *(n.name for n in cfg.nodes),
        cfg.cluster.domain,
        f".{cfg.cluster.domain}",
        ".svc",
    ]
    return Proxy(enabled=True, http=p.http, https=p.https, no_proxy=list(dict.fromkeys(entries)))


def linux_kubelet_flags(profile) -> list[str]:
    """The kubelet flags a joining Linux worker gets beyond --node-ip (cluster-join.sh puts them in
    KUBELET_EXTRA_ARGS). Era data of the box profile: kubeadm 1.11 does not tell the kubelet its
    pause image (kubernetes/kubeadm#1003), so that era names it; kubelet 1.35 has no such flag."""
    kube = profile.data.kubernetes
    return [f"--pod-infra-container-image={kube.pause_image}"] if kube.get("kubelet_pause_image_flag") else []
