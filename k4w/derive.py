"""Values derived once from the config, so every artifact agrees by construction.

The pod CIDR in kubeadm, Flannel's Network, the Windows CNI config and kube-proxy's
cluster-cidr all come from Network.pod_cidr; the kubelet's cluster-dns from dns_ip;
every NO_PROXY from Proxy.no_proxy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .config import Config, Node

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
    master: Node
    nodes: list[Node] = field(default_factory=list)


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
    def env(self) -> dict[str, str]:
        """The variables every downloader understands, upper and lower case, only those set."""
        values = {"HTTP_PROXY": self.http, "HTTPS_PROXY": self.https}
        out: dict[str, str] = {}
        for key, value in values.items():
            if value:
                out[key] = value
                out[key.lower()] = value
        if self.enabled:
            out["NO_PROXY"] = self.no_proxy_str
            out["no_proxy"] = self.no_proxy_str
        return out


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
        gateway=str(next(net.node_cidr.hosts())),
        dns_ip=str(dns_ip),
        kubernetes_service_ip=str(net.service_cidr.network_address + 1),
        api_ip=str(cfg.master.ip),
        api_port=API_PORT,
        cluster_domain=cfg.cluster.domain,
        backend=net.backend,
        flannel_netconf={"Network": str(net.pod_cidr), "Backend": backend},
        vxlan_vni=VXLAN_VNI,
        vxlan_port=VXLAN_PORT,
        # Names Flannel for Windows expects for the HNS network it creates per backend.
        windows_network_name="cbr0" if net.backend == "host-gw" else "vxlan0",
        master=cfg.master,
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
