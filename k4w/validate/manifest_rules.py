"""Check the rendered cluster artifacts: manifests, kubeadm config and Windows node configs.

Two kinds of rule:
- schema: every manifest validates with kubernetes-validate against its OLDEST bundled schema
  (it ships 1.25+ only) and uses only API groups that exist from Kubernetes 1.11 on;
- agreement: the pod CIDR, service CIDR, DNS IP, backend and node IPs are the same in kubeadm's
  config, Flannel's net-conf, the Windows CNI/net-conf and every kubelet/kube-proxy/flanneld
  argument (the top complaint in this field is a pod CIDR that differs between them).

check_manifests(out) returns one readable problem per broken rule; an empty list means all pass.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from k4w.derive import identities
from . import hostprocess_rules, node_mark_rules
from .args_file import read_args
from k4w.derive.values import VXLAN_PORT, VXLAN_VNI
from k4w.infra.errors import ToolMissing
from k4w.infra.tools import INSTALL
from k4w.model.version_skew import minor as version_minor
from k4w.validate.result import Result
from k4w.validate.result import rel
from k4w.derive.cluster import Cluster

# apps/v1 (DaemonSet, Deployment) is GA since 1.9 and rbac/v1 since 1.8: all exist in 1.11 and today.
ALLOWED_API_VERSIONS = ("v1", "apps/v1", "rbac.authorization.k8s.io/v1")
# The Windows network name Flannel's Windows backends use by default, per backend.
WINDOWS_NETWORK = {"host-gw": "cbr0", "vxlan": "vxlan0"}
WINDOWS_CNI_PLUGIN = {"host-gw": "win-bridge", "vxlan": "win-overlay"}


@dataclass
class Expected:
    """The values every artifact must agree on."""

    pod_cidr: str
    service_cidr: str
    dns_ip: str
    backend: str
    domain: str
    node_ips: dict[str, str] = field(default_factory=dict)
    os_label: str | None = None
    source: str = "cluster.yml"
    runtime: str = "docker"  # the master profile's container runtime component (kube.runtime)


def check_manifests(out_dir, cluster=None) -> list[str]:
    """Every problem found in OUT/manifests, OUT/kubeadm and OUT/nodes (empty = all good).

    With cluster (a k4w.derive.cluster.Cluster) the artifacts are compared with its derived values
    and Kubernetes era; without it, with the kubeadm config and vagrant/cluster.json, so
    cross-artifact agreement is still checked.
    """
    out = Path(out_dir)
    problems: list[str] = []
    # A cluster k4w did not make (cluster.existing) has its own kubeadm config and CNI: nothing of
    # k4w's to hold them to here; cluster-up compares cluster.yml with the live cluster instead
    # (k4w/cluster/facts.py) and checks its Flannel ClusterRole exists (k4w/cluster/existing.py).
    existing = cluster is not None and cluster.config.joins_existing
    kubeadm_docs = [] if existing else _load_yaml_docs(out / "kubeadm" / "kubeadm-config.yaml", problems)
    expected = _expected(out, cluster, kubeadm_docs, problems)
    problems += _check_manifest_schemas(out)
    if expected is None:
        return problems
    if not existing:
        problems += check_kubeadm(kubeadm_docs, expected)
        problems += check_flannel(out / "manifests" / "kube-flannel.yaml", expected)
    problems += check_node_selectors(out, expected, own_cni=not existing)
    problems += check_rbac_subjects(out)
    # The seed era's token-Secret identities; a containerd-era cluster renders none (hostprocess_rules
    # fails one that does).
    if (out / "manifests" / identities.SERVICE_IDENTITIES_MANIFEST).is_file() or not hostprocess_rules.all_windows_nodes_hostprocess(out):
        problems += check_windows_identities(out, own_cni=not existing)
    problems += hostprocess_rules.check(out, expected, cluster)
    problems += node_mark_rules.check(out, cluster)
    for node_dir in sorted((out / "nodes").glob("*")):
        if (node_dir / "kubelet.args").is_file():
            problems += check_windows_node(node_dir, expected)
    return problems


# ------------------------------------------------------------------ what to compare against

def _expected(out: Path, cluster, kubeadm_docs: list[dict], problems: list[str]) -> Expected | None:
    if cluster is not None:
        net = cluster.network
        return Expected(net.pod_cidr, net.service_cidr, net.dns_ip, net.backend, net.cluster_domain,
                        {n.name: str(n.ip) for n in net.nodes}, cluster.kube.os_label, runtime=cluster.kube.runtime)
    cluster = _load_json(out / "vagrant" / "cluster.json", problems) or {}
    networking = _kubeadm_networking(kubeadm_docs)
    netconf = _flannel_netconf(out / "manifests" / "kube-flannel.yaml", [])
    if not networking.get("podSubnet") or not networking.get("serviceSubnet") or not netconf:
        problems.append("cannot tell the expected pod/service CIDR and backend: kubeadm-config.yaml or kube-flannel.yaml is missing them")
        return None
    service = ipaddress.ip_network(networking["serviceSubnet"])
    return Expected(
        pod_cidr=networking["podSubnet"],
        service_cidr=networking["serviceSubnet"],
        dns_ip=str(service.network_address + 10),  # kubeadm's convention: the 10th address
        backend=str(netconf.get("Backend", {}).get("Type")),
        domain=networking.get("dnsDomain", "cluster.local"),
        node_ips={m["name"]: m["ip"] for m in cluster.get("machines", [])},
        source="kubeadm-config.yaml and vagrant/cluster.json",
    )


# ------------------------------------------------------------------ schemas and API groups

def manifest_files(out: Path) -> list[Path]:
    """Every rendered manifest cluster-up applies: OUT/manifests/*.yaml and a Windows node recipe's
    OUT/manifests/windows-<recipe>/*.yaml (patches/ holds patches, not objects)."""
    manifests = out / "manifests"
    return sorted(manifests.glob("*.yaml")) + sorted(manifests.glob("windows-*/*.yaml"))


def _check_manifest_schemas(out: Path) -> list[str]:
    try:
        import kubernetes_validate
        from kubernetes_validate import utils as kv_utils
    except ImportError as exc:  # a missing validator is a failure, never a silent pass
        raise ToolMissing("kubernetes-validate", INSTALL["kubernetes-validate"]) from exc

    oldest = kv_utils.all_versions()[0]
    problems = []
    files = manifest_files(out)
    if not files:
        return [f"{out / 'manifests'}: no manifests rendered"]
    for path in files:
        docs = _load_yaml_docs(path, problems)
        if not docs:
            problems.append(f"{path.name}: no Kubernetes objects")
        for doc in docs:
            name = f"{path.name}: {doc.get('kind', '?')}/{doc.get('metadata', {}).get('name', '?')}"
            api = doc.get("apiVersion")
            if api not in ALLOWED_API_VERSIONS:
                problems.append(f"{name}: apiVersion {api!r} is not one of {', '.join(ALLOWED_API_VERSIONS)} "
                                "(the API groups that exist from Kubernetes 1.11 on)")
                continue
            try:
                kubernetes_validate.validate(doc, oldest, strict=True)
            except kubernetes_validate.ValidationError as exc:
                where = "/".join(str(p) for p in exc.absolute_path) or "(top)"
                problems.append(f"{name}: kubernetes-validate {oldest} (strict): {where}: {exc.message}")
            except kubernetes_validate.SchemaNotFoundError as exc:
                problems.append(f"{name}: kubernetes-validate {oldest}: {exc.message}")
    return problems


# ------------------------------------------------------------------ identities and RBAC

# Groups every kubelet, every ServiceAccount or every client is in (Kubernetes "Using RBAC
# Authorization", default roles and role bindings): a binding to one widens what all of them may do.
BUILTIN_GROUP_PREFIX = "system:"


def check_rbac_subjects(out: Path) -> list[str]:
    """No rendered (Cluster)RoleBinding names a built-in group (system:nodes, system:authenticated,
    system:serviceaccounts...): each component gets an identity of its own instead."""
    problems: list[str] = []
    for path in manifest_files(out):
        for doc in _load_yaml_docs(path, problems):
            if doc.get("kind") not in ("ClusterRoleBinding", "RoleBinding"):
                continue
            for subject in doc.get("subjects") or []:
                if isinstance(subject, dict) and subject.get("kind") == "Group" and str(subject.get("name", "")).startswith(BUILTIN_GROUP_PREFIX):
                    problems.append(f"{path.name}: {doc['kind']}/{doc.get('metadata', {}).get('name', '?')} binds the built-in group "
                                    f"{subject['name']!r}, which widens what every member may do: bind a ServiceAccount of "
                                    "the one component that needs the role (k4w/derive/identities.py)")
    return problems


def check_windows_identities(out: Path, own_cni: bool = True) -> list[str]:
    """Each Windows component of k4w.derive.identities has its ServiceAccount, its token Secret and a
    binding to its Linux twin's ClusterRole in windows-node-rbac.yaml, and that ClusterRole is one
    the cluster has (the Flannel manifest's own, or a built-in system: role)."""
    problems: list[str] = []
    docs = _load_yaml_docs(out / "manifests" / "windows-node-rbac.yaml", problems)
    flannel_roles = {d.get("metadata", {}).get("name") for d in _load_yaml_docs(out / "manifests" / "kube-flannel.yaml", [])
                     if d.get("kind") == "ClusterRole"}

    def find(kind: str, name: str) -> dict | None:
        return next((d for d in docs if d.get("kind") == kind and d.get("metadata", {}).get("name") == name), None)

    for ident in identities.WINDOWS_COMPONENTS:
        where = f"windows-node-rbac.yaml ({ident.component})"
        account = find("ServiceAccount", ident.service_account)
        if not account or account["metadata"].get("namespace") != ident.namespace:
            problems.append(f"{where}: no ServiceAccount {ident.namespace}/{ident.service_account}")
        secret = find("Secret", ident.secret)
        if (not secret or secret.get("type") != "kubernetes.io/service-account-token"
                or (secret["metadata"].get("annotations") or {}).get("kubernetes.io/service-account.name") != ident.service_account):
            problems.append(f"{where}: no kubernetes.io/service-account-token Secret {ident.secret} for {ident.service_account}")
        bound = [d for d in docs if d.get("kind") == "ClusterRoleBinding"
                 and any(s.get("kind") == "ServiceAccount" and s.get("name") == ident.service_account
                         and s.get("namespace") == ident.namespace for s in d.get("subjects") or [])]
        roles = sorted({d.get("roleRef", {}).get("name") for d in bound})
        if roles != [ident.cluster_role]:
            problems.append(f"{where}: {ident.service_account} is bound to {roles or 'nothing'}, its Linux twin has {ident.cluster_role!r}")
        if own_cni and not ident.cluster_role.startswith("system:") and ident.cluster_role not in flannel_roles:
            problems.append(f"{where}: ClusterRole {ident.cluster_role!r} is not in kube-flannel.yaml (has {sorted(filter(None, flannel_roles))})")
    return problems


# ------------------------------------------------------------------ kubeadm

def _kubeadm_networking(docs: list[dict]) -> dict:
    for doc in docs:
        if doc.get("kind") in ("MasterConfiguration", "ClusterConfiguration"):
            return doc.get("networking") or {}
    return {}


def check_kubeadm(docs: list[dict], exp: Expected) -> list[str]:
    where = "kubeadm-config.yaml"
    if not docs:
        return [f"{where}: missing or empty"]
    by_kind = {doc.get("kind"): doc for doc in docs}
    problems = []
    networking = _kubeadm_networking(docs)
    for key, want in (("podSubnet", exp.pod_cidr), ("serviceSubnet", exp.service_cidr), ("dnsDomain", exp.domain)):
        if networking.get(key) != want:
            problems.append(f"{where}: networking.{key} is {networking.get(key)!r}, {exp.source} says {want!r}")
    if "MasterConfiguration" in by_kind:  # v1alpha2 embeds the component configs
        master = by_kind["MasterConfiguration"]
        proxy = ((master.get("kubeProxy") or {}).get("config") or {})
        kubelet = ((master.get("kubeletConfiguration") or {}).get("baseConfig") or {})
        proxy_key, kubelet_key = "kubeProxy.config", "kubeletConfiguration.baseConfig"
    else:
        proxy = by_kind.get("KubeProxyConfiguration") or {}
        kubelet = by_kind.get("KubeletConfiguration") or {}
        proxy_key, kubelet_key = "KubeProxyConfiguration", "KubeletConfiguration"
    if proxy.get("clusterCIDR") != exp.pod_cidr:
        problems.append(f"{where}: {proxy_key}.clusterCIDR is {proxy.get('clusterCIDR')!r}, the pod CIDR is {exp.pod_cidr!r}")
    if kubelet.get("clusterDNS") != [exp.dns_ip]:
        problems.append(f"{where}: {kubelet_key}.clusterDNS is {kubelet.get('clusterDNS')!r}, the cluster DNS IP is {exp.dns_ip!r}")
    if not kubelet.get("cgroupDriver"):
        problems.append(f"{where}: {kubelet_key}.cgroupDriver is missing: set components.{exp.runtime}.cgroup_driver in the "
                        f"master's box profile (boxes/<box>.yml) so the kubelet uses {exp.runtime}'s driver (kube.cgroup_driver)")
    return problems


# ------------------------------------------------------------------ Flannel (Linux)

def _flannel_netconf(path: Path, problems: list[str]) -> dict | None:
    for doc in _load_yaml_docs(path, problems):
        if doc.get("kind") == "ConfigMap" and "net-conf.json" in (doc.get("data") or {}):
            try:
                return json.loads(doc["data"]["net-conf.json"])
            except json.JSONDecodeError as exc:
                problems.append(f"{path.name}: net-conf.json is not JSON: {exc}")
                return None
    problems.append(f"{path.name}: no ConfigMap with net-conf.json")
    return None


def check_netconf(netconf: dict, exp: Expected, where: str) -> list[str]:
    problems = []
    if netconf.get("Network") != exp.pod_cidr:
        problems.append(f"{where}: Network is {netconf.get('Network')!r}, the pod CIDR is {exp.pod_cidr!r}")
    backend = netconf.get("Backend") or {}
    kind = backend.get("Type", backend.get("type"))
    if kind != exp.backend:
        problems.append(f"{where}: Backend.Type is {kind!r}, network.backend is {exp.backend!r}")
    if exp.backend == "vxlan":
        # Windows' vxlan only interoperates with VNI 4096 on UDP 4789 (Flannel's Windows docs).
        if backend.get("VNI") != VXLAN_VNI or backend.get("Port") != VXLAN_PORT:
            problems.append(f"{where}: vxlan needs VNI {VXLAN_VNI} and Port {VXLAN_PORT}, found VNI {backend.get('VNI')!r} Port {backend.get('Port')!r}")
    elif "VNI" in backend or "Port" in backend:
        problems.append(f"{where}: VNI/Port are vxlan settings but the backend is {exp.backend!r}")
    return problems


def check_flannel(path: Path, exp: Expected) -> list[str]:
    problems: list[str] = []
    netconf = _flannel_netconf(path, problems)
    if netconf is not None:
        problems += check_netconf(netconf, exp, f"{path.name} net-conf.json")
    return problems


def check_node_selectors(out: Path, exp: Expected, own_cni: bool = True) -> list[str]:
    """Flannel and kube-proxy pods on Linux only; the demo on Windows only. Without own_cni (a
    cluster k4w did not make) k4w renders neither Flannel nor the kube-proxy patch."""
    problems: list[str] = []
    label = exp.os_label
    # The demo's Pod too: its Nano Server volume check.
    wanted = {"kube-flannel.yaml": (("DaemonSet",), "linux"), "demo-win-webserver.yaml": (("Deployment", "Pod"), "windows")}
    if not own_cni:
        del wanted["kube-flannel.yaml"]
    for name, (kinds, os_name) in wanted.items():
        for doc in _load_yaml_docs(out / "manifests" / name, problems):
            kind = doc.get("kind")
            if kind not in kinds:
                continue
            pod_spec = (doc.get("spec") or {}) if kind == "Pod" else (((doc.get("spec") or {}).get("template") or {}).get("spec") or {})
            selector = pod_spec.get("nodeSelector") or {}
            if not _selects(selector, label, os_name):
                problems.append(f"{name}: {kind} {doc['metadata']['name']} needs nodeSelector {label or '<os label>'}: {os_name}, has {selector}")
    patch_path = out / "manifests" / "patches" / "linux-node-selector.yaml"
    if not own_cni:
        return problems
    patch = _load_yaml_docs(patch_path, problems)
    if len(patch) != 1 or set(patch[0]) != {"spec"}:
        problems.append(f"patches/{patch_path.name}: must be one strategic-merge patch document with only 'spec'")
    else:
        selector = ((patch[0]["spec"].get("template") or {}).get("spec") or {}).get("nodeSelector") or {}
        if not _selects(selector, label, "linux"):
            problems.append(f"patches/{patch_path.name}: spec.template.spec.nodeSelector must be {label or '<os label>'}: linux, is {selector}")
    return problems


def _selects(selector: dict, label: str | None, os_name: str) -> bool:
    if label is not None:
        return selector.get(label) == os_name
    return any(k.endswith("kubernetes.io/os") and v == os_name for k, v in selector.items())


# ------------------------------------------------------------------ Windows node configs

# The kubelet minor from which --pod-infra-container-image must not be rendered: the flag is
# deprecated for removal in 1.35 (pkg/kubelet/config/flags.go) and the issue-14 stack drops it from 1.34.
PAUSE_FLAG_GONE = (1, 34)


def check_windows_node(node_dir: Path, exp: Expected) -> list[str]:
    node = node_dir.name
    where = f"nodes/{node}"
    problems: list[str] = []
    # A node whose flanneld and kube-proxy are HostProcess DaemonSets (node.json node_daemons) has no
    # files of theirs: one there would be a service of the seed era rendered for the containerd era.
    hostprocess = _node_daemons(node_dir / "node.json") == HOSTPROCESS
    service_files = ("kube-proxy.args", "kube-proxy.env", "flanneld.args", "flanneld.env")
    if hostprocess:
        leftover = [name for name in service_files if (node_dir / name).is_file()]
        if leftover:
            problems.append(f"{where}: {', '.join(leftover)} rendered, but this node runs flanneld and kube-proxy as "
                            "HostProcess DaemonSets (node.json node_daemons): no Windows service of theirs may be "
                            "configured on the containerd era")
    wanted_files = ("kubelet.args", "net-conf.json", "cni.conf", "node.json") + (() if hostprocess else service_files)
    files = {name: node_dir / name for name in wanted_files}
    missing = [name for name, path in files.items() if not path.is_file()]
    if missing:
        return problems + [f"{where}: missing {', '.join(missing)}"]
    for name in [n for n in ("kubelet.args", "kube-proxy.args", "flanneld.args") if n in files]:
        for number, line in enumerate(files[name].read_text(encoding="utf-8").splitlines(), 1):
            # Each line becomes one argument of the service's command line: no spaces, no stray text.
            if line.strip() and (not line.startswith("--") or any(c.isspace() for c in line)):
                problems.append(f"{where}/{name} line {number}: {line!r} is not a single --flag[=value] argument")
    node_ip = exp.node_ips.get(node)
    kubelet = read_args(files["kubelet.args"])
    info = _load_json(files["node.json"], problems)
    # A node of the containerd era says so in its node.json: kubeadm's config.yaml then carries the
    # cluster DNS and domain (check_kubeadm holds them), and its kubelet version decides the pause flag.
    kubeadm_config = info is not None and info.get("kubelet_config") == "kubeadm"
    wants = [] if kubeadm_config else [
        ("kubelet.args", kubelet, "--cluster-dns", exp.dns_ip, "the cluster DNS IP"),
        ("kubelet.args", kubelet, "--cluster-domain", exp.domain, "the cluster domain"),
    ]
    wants += [
        ("kubelet.args", kubelet, "--hostname-override", node, "the node name"),
        ("kubelet.args", kubelet, "--node-ip", node_ip, "the node's cluster IP"),
    ]
    for name, args, flag, want, what in wants:
        if args.get(flag) != want:
            problems.append(f"{where}/{name}: {flag} is {args.get(flag)!r}, {what} is {want!r}")
    if not hostprocess:
        problems += _check_service_files(files, exp, node, node_ip, kubelet, where)
    version = str((info or {}).get("kubernetes_version") or "")
    if version and version_minor(version) >= PAUSE_FLAG_GONE:
        if "--pod-infra-container-image" in kubelet:
            problems.append(f"{where}/kubelet.args: --pod-infra-container-image is rendered for kubelet {version}, which has no "
                            "such flag from 1.34 on: the pause image belongs in containerd's pinned_images.sandbox only")
    elif not kubelet.get("--pod-infra-container-image"):
        problems.append(f"{where}/kubelet.args: --pod-infra-container-image is missing: set kubernetes.pause_image in the "
                        "Windows box profile (Linux pause images do not run on Windows)")
    network = WINDOWS_NETWORK.get(exp.backend)
    netconf = _load_json(files["net-conf.json"], problems)
    if netconf is not None:
        problems += check_netconf(netconf, exp, f"{where}/net-conf.json")
        name = (netconf.get("Backend") or {}).get("name")
        if name != network:
            problems.append(f"{where}/net-conf.json: Backend.name is {name!r}, {exp.backend} needs {network!r}")
    cni = _load_json(files["cni.conf"], problems)
    if cni is not None:
        problems += check_cni(cni, exp, node_ip, f"{where}/cni.conf", runtime=(info or {}).get("runtime_service", "docker"))
    if info is not None and (info.get("name") != node or info.get("network_name") != network or info.get("ip") != node_ip):
        problems.append(f"{where}/node.json: {info} does not match node {node!r}, ip {node_ip!r}, network {network!r}")
    # start-node.ps1 takes its firewall rule and kube-proxy readiness check from these.
    # The API server's ClusterIP: the first address of the service CIDR (kubeadm's convention).
    api_service_ip = str(ipaddress.ip_network(exp.service_cidr).network_address + 1)
    for key, want in (("pod_cidr", exp.pod_cidr), ("dns_ip", exp.dns_ip), ("backend", exp.backend),
                      ("kubernetes_service_ip", api_service_ip)):
        if info is not None and key in info and info[key] != want:
            problems.append(f"{where}/node.json: {key} is {info[key]!r}, expected {want!r} ({exp.source})")
    return problems


HOSTPROCESS = "hostprocess"   # node.json node_daemons of a node whose flanneld and kube-proxy are DaemonSets


def _node_daemons(path: Path) -> str | None:
    try:
        return (json.loads(path.read_text(encoding="utf-8")) or {}).get("node_daemons")
    except (OSError, ValueError, AttributeError):
        return None  # check_windows_node names a missing or broken node.json


def _check_service_files(files: dict, exp: Expected, node: str, node_ip: str | None, kubelet: dict, where: str) -> list[str]:
    """The seed era's flanneld and kube-proxy services: their arguments and environment agree with
    the cluster, and each runs on an identity of its own."""
    problems = []
    for name, args, flag, want, what in (
        ("kube-proxy.args", read_args(files["kube-proxy.args"]), "--cluster-cidr", exp.pod_cidr, "the pod CIDR"),
        ("kube-proxy.args", read_args(files["kube-proxy.args"]), "--hostname-override", node, "the node name"),
        ("flanneld.args", read_args(files["flanneld.args"]), "--iface", node_ip, "the node's cluster IP"),
    ):
        if args.get(flag) != want:
            problems.append(f"{where}/{name}: {flag} is {args.get(flag)!r}, {what} is {want!r}")
    # flanneld and kube-proxy run on identities of their own, never on the kubelet's credentials.
    for name, flag, component in (("flanneld.args", "--kubeconfig-file", "flanneld"), ("kube-proxy.args", "--kubeconfig", "kube-proxy")):
        want = identities.by_component(component).kubeconfig
        got = read_args(files[name]).get(flag)
        if got != want:
            problems.append(f"{where}/{name}: {flag} is {got!r}, {component}'s own kubeconfig is {want!r} (k4w/derive/identities.py)"
                            + (": that is the kubelet's credential" if got and got == kubelet.get("--kubeconfig") else ""))
    network = WINDOWS_NETWORK.get(exp.backend)
    env = dict(line.split("=", 1) for line in files["flanneld.env"].read_text(encoding="utf-8").splitlines() if "=" in line)
    if env.get("NODE_NAME") != node:
        problems.append(f"{where}/flanneld.env: NODE_NAME is {env.get('NODE_NAME')!r}, the node is {node!r}")
    proxy_env = dict(line.split("=", 1) for line in files["kube-proxy.env"].read_text(encoding="utf-8").splitlines() if "=" in line)
    if proxy_env.get("KUBE_NETWORK") != network:
        problems.append(f"{where}/kube-proxy.env: KUBE_NETWORK is {proxy_env.get('KUBE_NETWORK')!r}, Flannel's network is {network!r}")
    return problems


def check_cni(cni: dict, exp: Expected, node_ip: str | None, where: str, runtime: str = "docker") -> list[str]:
    """The Windows CNI config. Under containerd the delegate must use HCN (apiVersion 2), whose
    policies carry their values under Settings (containernetworking/plugins v1.9.1 win-overlay
    sample-v2.conf); Docker's HNS v1 shape puts them flat (ExceptionList, ROUTE)."""
    problems = []
    network = WINDOWS_NETWORK.get(exp.backend)
    if cni.get("type") != "flannel" or cni.get("name") != network:
        problems.append(f"{where}: must be the flannel plugin named {network!r}, is type {cni.get('type')!r} name {cni.get('name')!r}")
    delegate = cni.get("delegate") or {}
    plugin = WINDOWS_CNI_PLUGIN.get(exp.backend)
    if delegate.get("type") != plugin:
        problems.append(f"{where}: delegate.type is {delegate.get('type')!r}, {exp.backend} needs {plugin!r}")
    dns = delegate.get("dns") or {}
    if dns.get("Nameservers") != [exp.dns_ip]:
        problems.append(f"{where}: dns.Nameservers is {dns.get('Nameservers')!r}, the cluster DNS IP is {exp.dns_ip!r}")
    if not any(s.endswith(exp.domain) for s in dns.get("Search") or []):
        problems.append(f"{where}: dns.Search {dns.get('Search')!r} has no suffix of the cluster domain {exp.domain!r}")
    hcn = delegate.get("apiVersion") == 2
    if runtime == "containerd":
        if not hcn:
            problems.append(f"{where}: delegate.apiVersion must be 2 under containerd: win-overlay's HNS v1 path creates no "
                            "endpoint for a pod namespace other than Docker's 'none', and containerd gives each pod its own")
        if not (cni.get("capabilities") or {}).get("dns"):
            problems.append(f"{where}: capabilities.dns is not set, so containerd cannot pass each pod's DNS settings "
                            "(its own namespace's search path) to the plugin")
    values = [p.get("value") or p.get("Value") or {} for p in delegate.get("policies") or []]
    settings = [dict(v, **(v.get("Settings") or {})) if hcn else v for v in values]
    exceptions_key, route_type = ("Exceptions", "SDNRoute") if hcn else ("ExceptionList", "ROUTE")
    nat = [v for v in settings if v.get("Type") == "OutBoundNAT"]
    exceptions = nat[0].get(exceptions_key, []) if nat else []
    for cidr, what in ((exp.pod_cidr, "pod"), (exp.service_cidr, "service")):
        if cidr not in exceptions:
            problems.append(f"{where}: the OutBoundNAT {exceptions_key} {exceptions} lacks the {what} CIDR {cidr}")
    routes = {v.get("DestinationPrefix") for v in settings if v.get("Type") == route_type}
    if exp.service_cidr not in routes:
        problems.append(f"{where}: no {route_type} policy for the service CIDR {exp.service_cidr} (services would not be reachable from pods)")
    if exp.backend == "host-gw" and node_ip and f"{node_ip}/32" not in routes:
        problems.append(f"{where}: host-gw needs a {route_type} policy for the node's own IP {node_ip}/32")
    return problems


# ------------------------------------------------------------------ helpers

def _load_yaml_docs(path: Path, problems: list[str]) -> list[dict]:
    if not path.is_file():
        problems.append(f"{path.name}: not rendered")
        return []
    try:
        return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]
    except yaml.YAMLError as exc:
        problems.append(f"{path.name}: not valid YAML: {exc}")
        return []


def _load_json(path: Path, problems: list[str]):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        problems.append(f"{path}: not rendered")
    except json.JSONDecodeError as exc:
        problems.append(f"{path.parent.name}/{path.name}: not valid JSON: {exc}")
    return None


# ------------------------------------------------------------------ the validator (k4w.validate.VALIDATORS)


def run(cluster: Cluster, out: Path) -> Result:
    res = Result("Kubernetes manifests and node configs", "kubernetes-validate + structural rules")
    res.checked = [rel(p) for p in sorted((out / "manifests").rglob("*.yaml"))]
    res.checked += [rel(p) for p in sorted((out / "kubeadm").glob("*"))]
    res.checked += [rel(p) for p in sorted((out / "nodes").rglob("*")) if p.is_file()]
    res.problems = check_manifests(out, cluster)
    return res


def would_run(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    return [f"# in this process: kubernetes-validate and agreement rules on {out / d}" for d in ("manifests", "kubeadm", "nodes")]
