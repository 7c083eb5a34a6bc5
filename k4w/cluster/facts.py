"""The facts of a cluster k4w did not create, read through its API, and the refusal of a cluster.yml
that does not fit them (cluster.existing).

Where each fact comes from (the objects kubeadm writes, kubernetes/kubernetes@v1.37.2, the same
names as at v1.35.4; the Go module proxy's v1.37.2.info; cmd/kubeadm/app/constants/constants.go):
- version: GET /version (gitVersion);
- pod and service CIDR, cluster domain: the kubeadm-config ConfigMap in kube-system, key
  ClusterConfiguration, `networking.podSubnet/serviceSubnet/dnsDomain` (KubeadmConfigConfigMap,
  ClusterConfigurationConfigMapKey); without it (a cluster not made by kubeadm) the nodes'
  spec.podCIDRs and the `kubernetes` Service's ClusterIP (the first address of the service range);
- cluster DNS IP: the kube-dns Service's ClusterIP in kube-system (kubeadm's CoreDNS Service keeps that
  name), else clusterDNS of the kubelet-config ConfigMap (KubeletBaseConfigurationConfigMap);
- CNI: Flannel's kube-flannel-cfg ConfigMap (namespace kube-flannel from v0.20, kube-system before),
  net-conf.json Network and Backend {Type, VNI, Port}; otherwise the CNI DaemonSets found by name.

The version-skew rule (k4w.model.version_skew) between the cluster's API server and each box that joins it.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from pathlib import Path

from k4w.infra import documents
from k4w.derive.cluster import Cluster
from k4w.infra.errors import K4wError
from k4w.cluster.kubeapi import ApiError, Client
from k4w.model.version_skew import skew_problem
from . import api_models as M

KUBEADM_CONFIG = "/api/v1/namespaces/kube-system/configmaps/kubeadm-config"
KUBELET_CONFIG = "/api/v1/namespaces/kube-system/configmaps/kubelet-config"
KUBE_DNS = "/api/v1/namespaces/kube-system/services/kube-dns"
KUBERNETES_SERVICE = "/api/v1/namespaces/default/services/kubernetes"
FLANNEL_CONFIGMAPS = ("kube-flannel", "kube-system")    # Flannel's namespace since v0.20.0, and before it
FLANNEL_CONFIGMAP = "kube-flannel-cfg"
# DaemonSet names of other CNIs, so a refusal can say what the cluster runs instead of Flannel.
OTHER_CNIS = {"calico-node": "Calico", "cilium": "Cilium", "weave-net": "Weave Net", "kube-router": "kube-router",
              "canal": "Canal", "antrea-agent": "Antrea", "kube-ovn-cni": "Kube-OVN"}


@dataclass
class Facts:
    server: str
    version: str                      # gitVersion, e.g. v1.37.2
    pod_cidr: str | None = None       # None when not recorded anywhere we can read
    pod_cidr_source: str = ""
    node_pod_cidrs: dict[str, list[str]] = field(default_factory=dict)
    service_cidr: str | None = None
    service_cidr_source: str = ""
    kubernetes_service_ip: str | None = None
    dns_ip: str | None = None
    dns_ip_source: str = ""
    cluster_domain: str | None = None
    flannel: dict | None = None       # net-conf.json
    flannel_source: str = ""
    other_cni: list[str] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    node_labels: dict[str, dict[str, str]] = field(default_factory=dict)   # {node: its labels}

    def rows(self) -> list[list[str]]:
        """One plan row per fact, with where it was read."""
        backend = _key(self.flannel, "Backend") or {}
        kind = _key(backend, "Type") or "udp"
        cni = (f"Flannel {kind}" + (f" VNI {_key(backend, 'VNI')} port {_key(backend, 'Port')}" if kind == "vxlan" else "")
               + f" (Network {_key(self.flannel, 'Network')}; {self.flannel_source})") if self.flannel else (
            "not Flannel: " + (", ".join(self.other_cni) or "no CNI DaemonSet k4w knows"))
        return [
            ["API server", f"{self.server} ({self.version})"],
            ["pod CIDR", f"{self.pod_cidr or '-'} ({self.pod_cidr_source or 'not recorded'})"],
            ["service CIDR", f"{self.service_cidr or '-'} ({self.service_cidr_source or 'not recorded'})"],
            ["cluster DNS IP", f"{self.dns_ip or '-'} ({self.dns_ip_source or 'not found'})"],
            ["cluster domain", self.cluster_domain or "- (not recorded)"],
            ["CNI", cni],
            ["nodes", ", ".join(self.nodes) or "-"],
        ]


def answer(api: Client, model: type[M.Shape], path: str, optional: bool = False):
    """GET path held to model (k4w.infra.documents.parse): a wrong shape is one line naming the URL and the
    field. optional: None when the API server says 404."""
    data = api.get_optional(path) if optional else api.get(path)
    return None if data is None else documents.parse(model, data, f"GET {api.creds.server}{path}")


def _configmap_yaml(cm: dict | None, key: str, where: str, model: type[M.Shape]):
    """The YAML document under data[key] of a ConfigMap, held to model; None when absent or empty."""
    if not cm:
        return None
    text = (documents.parse(M.ConfigMap, cm, where).data or {}).get(key)
    if not text:
        return None
    value = documents.yaml_value(text, f"{where} {key}")
    return None if value is None else documents.parse(model, value, f"{where} {key}")


def read(api: Client) -> Facts:
    """Every fact, read through the API (GETs only); every answer held to its shape (k4w.cluster.api_models)."""
    version = answer(api, M.VersionInfo, "/version").gitVersion
    facts = Facts(server=api.creds.server, version=version)

    cluster_cfg = _configmap_yaml(api.get_optional(KUBEADM_CONFIG), "ClusterConfiguration", "kube-system/kubeadm-config",
                                  M.ClusterConfiguration)
    networking = (cluster_cfg and cluster_cfg.networking) or M.Networking()
    if networking.podSubnet:
        facts.pod_cidr, facts.pod_cidr_source = networking.podSubnet, "kubeadm-config networking.podSubnet"
    if networking.serviceSubnet:
        facts.service_cidr, facts.service_cidr_source = networking.serviceSubnet, "kubeadm-config networking.serviceSubnet"
    facts.cluster_domain = networking.dnsDomain

    for node in answer(api, M.NodeList, "/api/v1/nodes").items or []:
        name = node.metadata.name
        facts.nodes.append(name)
        facts.node_labels[name] = dict(node.metadata.labels or {})
        spec = node.spec or M.NodeSpec()
        cidrs = spec.podCIDRs or ([spec.podCIDR] if spec.podCIDR else [])
        if cidrs:
            facts.node_pod_cidrs[name] = list(cidrs)
    if facts.pod_cidr is None and facts.node_pod_cidrs:
        facts.pod_cidr_source = "not recorded; nodes' spec.podCIDRs " + ", ".join(
            f"{n} {'/'.join(c)}" for n, c in facts.node_pod_cidrs.items())

    kubernetes = answer(api, M.Service, KUBERNETES_SERVICE, optional=True)
    facts.kubernetes_service_ip = kubernetes and kubernetes.spec and kubernetes.spec.clusterIP
    if facts.service_cidr is None and facts.kubernetes_service_ip:
        facts.service_cidr_source = f"not recorded; the kubernetes Service has ClusterIP {facts.kubernetes_service_ip}"

    dns = answer(api, M.Service, KUBE_DNS, optional=True)
    if dns and dns.spec and dns.spec.clusterIP:
        facts.dns_ip, facts.dns_ip_source = dns.spec.clusterIP, "Service kube-system/kube-dns"
    else:
        kubelet = _configmap_yaml(api.get_optional(KUBELET_CONFIG), "kubelet", "kube-system/kubelet-config", M.KubeletConfiguration)
        if kubelet and kubelet.clusterDNS:
            facts.dns_ip, facts.dns_ip_source = kubelet.clusterDNS[0], "kube-system/kubelet-config clusterDNS"

    for namespace in FLANNEL_CONFIGMAPS:
        path = f"/api/v1/namespaces/{namespace}/configmaps/{FLANNEL_CONFIGMAP}"
        cm = answer(api, M.ConfigMap, path, optional=True)
        text = ((cm and cm.data) or {}).get("net-conf.json")
        if text:
            facts.flannel = netconf(text, f"ConfigMap {namespace}/{FLANNEL_CONFIGMAP} net-conf.json")
            facts.flannel_source = f"ConfigMap {namespace}/{FLANNEL_CONFIGMAP}"
            break
    if facts.flannel is None:
        daemonsets = answer(api, M.DaemonSetList, "/apis/apps/v1/daemonsets").items or []
        facts.other_cni = sorted({f"{OTHER_CNIS[d.metadata.name]} (DaemonSet {d.metadata.namespace}/{d.metadata.name})"
                                  for d in daemonsets if d.metadata.name in OTHER_CNIS})
    return facts


def netconf(text: str, source: str) -> dict:
    """A net-conf.json, decoded and held to Flannel's shape (Network a CIDR, Backend an object with
    integer VNI and Port): the dict as written, for _key's case-insensitive reads."""
    value = documents.json_value(text, source)
    documents.parse(M.NetConf, value, source)
    return value


def mismatches(facts: Facts, cluster: Cluster) -> list[str]:
    """Each way cluster.yml disagrees with the cluster, naming both values; empty when it fits."""
    cfg, net = cluster.config, cluster.network
    problems: list[str] = []
    if facts.pod_cidr and ipaddress.ip_network(facts.pod_cidr, strict=False) != cfg.network.pod_cidr:
        problems.append(f"pod CIDR: the cluster uses {facts.pod_cidr} ({facts.pod_cidr_source}), "
                        f"cluster.yml network.pod_cidr is {cfg.network.pod_cidr}")
    elif facts.pod_cidr is None:
        outside = [f"{n} {c}" for n, cidrs in facts.node_pod_cidrs.items() for c in cidrs
                   if ":" not in c and not ipaddress.ip_network(c, strict=False).subnet_of(cfg.network.pod_cidr)]
        if outside:
            problems.append(f"pod CIDR: nodes' podCIDRs {', '.join(outside)} lie outside cluster.yml network.pod_cidr {cfg.network.pod_cidr}")
    if facts.service_cidr and ipaddress.ip_network(facts.service_cidr, strict=False) != cfg.network.service_cidr:
        problems.append(f"service CIDR: the cluster uses {facts.service_cidr} ({facts.service_cidr_source}), "
                        f"cluster.yml network.service_cidr is {cfg.network.service_cidr}")
    elif facts.service_cidr is None and facts.kubernetes_service_ip and facts.kubernetes_service_ip != net.kubernetes_service_ip:
        problems.append(f"service CIDR: the kubernetes Service has ClusterIP {facts.kubernetes_service_ip}, the first address of "
                        f"cluster.yml network.service_cidr {cfg.network.service_cidr} is {net.kubernetes_service_ip}")
    if facts.dns_ip and facts.dns_ip != net.dns_ip:
        problems.append(f"cluster DNS IP: the cluster's is {facts.dns_ip} ({facts.dns_ip_source}), cluster.yml's "
                        f"network.service_cidr gives {net.dns_ip} (its 10th address, kubelet --cluster-dns)")
    elif not facts.dns_ip:
        problems.append("cluster DNS IP: the cluster has no kube-system/kube-dns Service and no kubelet-config clusterDNS; "
                        f"the Windows kubelet would be given {net.dns_ip}, which nothing answers")
    if facts.cluster_domain and facts.cluster_domain != cfg.cluster.domain:
        problems.append(f"cluster domain: the cluster uses {facts.cluster_domain} (kubeadm-config networking.dnsDomain), "
                        f"cluster.yml cluster.domain is {cfg.cluster.domain}")
    problems += _flannel_mismatches(facts, cluster)
    for box, profile in cluster.profiles.items():
        version = (profile.data.get("kubernetes") or {}).get("version")
        if version:
            problem = skew_problem(facts.version, str(version), f"box {box}")
            if problem:
                problems.append(problem)
    return problems


def _flannel_mismatches(facts: Facts, cluster: Cluster) -> list[str]:
    cfg, net = cluster.config, cluster.network
    if facts.flannel is None:
        found = ", ".join(facts.other_cni) or "no kube-flannel-cfg ConfigMap in kube-flannel or kube-system and no CNI DaemonSet k4w knows"
        return [f"CNI: k4w's Windows nodes run Flannel ({cfg.network.backend}), the cluster runs {found}"]
    problems = []
    where = facts.flannel_source
    network = _key(facts.flannel, "Network")
    if network and ipaddress.ip_network(network, strict=False) != cfg.network.pod_cidr:
        problems.append(f"Flannel Network: {network} in {where}, cluster.yml network.pod_cidr is {cfg.network.pod_cidr}")
    backend = _key(facts.flannel, "Backend") or {}
    # flannel-io/flannel@v0.28.10 (unchanged from v0.28.9): no Type means udp (pkg/subnet/config.go ParseBackendType); vxlan
    # without VNI/Port uses defaultVNI 1 and port 0, the Linux kernel's vxlan default 8472
    # (pkg/backend/vxlan/vxlan.go). Go's encoding/json matches these keys case-insensitively.
    kind = _key(backend, "Type") or "udp"
    if kind != cfg.network.backend:
        problems.append(f"Flannel backend: {kind} in {where}, cluster.yml network.backend is {cfg.network.backend}")
    elif kind == "vxlan":
        # Windows needs VNI 4096 and UDP 4789 (k4w.derive.values says where that comes from).
        vni, port = _key(backend, "VNI") or 1, _key(backend, "Port") or 8472
        if vni != net.vxlan_vni:
            problems.append(f"Flannel VNI: {vni} in {where}, Windows nodes need {net.vxlan_vni} (derive.VXLAN_VNI)")
        if port != net.vxlan_port:
            problems.append(f"Flannel vxlan port: {port} in {where}, Windows nodes need {net.vxlan_port} (derive.VXLAN_PORT)")
    return problems


def flannel_values(netconf: dict) -> dict:
    """What a Windows flanneld must share with the cluster's Flannel, read the way flanneld reads it
    (the defaults of _flannel_mismatches' sources)."""
    backend = _key(netconf, "Backend") or {}
    kind = _key(backend, "Type") or "udp"
    network = _key(netconf, "Network")
    values = {"Network": str(ipaddress.ip_network(network, strict=False)) if network else None, "Backend Type": kind}
    if kind == "vxlan":
        values.update({"Backend VNI": _key(backend, "VNI") or 1, "Backend Port": _key(backend, "Port") or 8472})
    return values


def netconf_mismatches(facts: Facts, artifacts: Path) -> list[str]:
    """Each rendered Windows node net-conf.json (OUT/nodes/<node>/, what its flanneld reads) held to the
    cluster's own net-conf facts, value by value: the file is what runs, cluster.yml only made it."""
    if facts.flannel is None:
        return []   # no Flannel in the cluster: _flannel_mismatches refuses that already
    cluster_values = flannel_values(facts.flannel)
    problems = []
    for path in sorted(Path(artifacts).glob("nodes/*/net-conf.json")):
        try:
            node_values = flannel_values(netconf(path.read_text(encoding="utf-8"), str(path)))
        except (OSError, ValueError, K4wError) as exc:
            problems.append(f"{path}: cannot read it ({exc}): run `invoke render`")
            continue
        for name, value in node_values.items():
            if value != cluster_values.get(name):
                problems.append(f"Flannel {name}: {cluster_values.get(name)} in {facts.flannel_source}, "
                                f"{value} in {path.relative_to(artifacts)} (what the Windows flanneld reads)")
    return problems


def _key(mapping: dict, name: str):
    """mapping[name], matched without regard to case, as flanneld's encoding/json reads net-conf.json."""
    return next((v for k, v in (mapping or {}).items() if k.lower() == name.lower()), None)


def check(api: Client, cluster: Cluster) -> Facts:
    """Read the facts and refuse, naming every mismatch, before anything is started or applied."""
    try:
        facts = read(api)
    except ApiError as exc:
        raise K4wError(f"cluster.existing: cannot read the cluster's facts: {exc}") from None
    problems = mismatches(facts, cluster)
    if problems:
        raise K4wError(f"cluster.yml does not fit the existing cluster at {facts.server} (nothing was started or changed):\n"
                       + "\n".join(f"  - {p}" for p in problems))
    return facts

