"""Rules for the containerd era's Windows node DaemonSets (templates/manifests/windows-<recipe>/).

HostProcess pods are host-level: SYSTEM on the node, with its file system, its network and every
credential stored there. So beyond the schema:
- only the DaemonSets of k4w.derive.identities.HOSTPROCESS_DAEMONSETS, in their own namespace, may be
  HostProcess anywhere in the rendered manifests, and that namespace states its Pod Security level;
- each runs as its Linux twin does (its own ServiceAccount, bound to exactly the twin's ClusterRole,
  hostNetwork, the OS selector) from the HostProcess base image pinned by digest, with no secret in
  its ConfigMap, env or volumes, and no kubeconfig flag (in-cluster credentials, never the kubelet's);
- the flags in its ConfigMap agree with the cluster (pod CIDR, Flannel's network) and the node-only
  values come from the node (${NODE_NAME}, ${NODE_IP});
- the manifests validate with kubernetes-validate at the cluster's own Kubernetes minor, not only
  the oldest bundled schema;
- no probe runs Add-Type, in its command, its script or a script that one dot-sources: the kubelet
  starts a new powershell.exe every period, and each Add-Type compiles C# again;
- no Windows node of the era has a flanneld or kube-proxy service: its box registers only
  node_services (the rendered Packer template's K4W_NODE_SERVICES), and node files of theirs are
  caught by manifest_rules.check_windows_node.

check(out, expected, cluster) returns one readable problem per broken rule.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from k4w.derive import identities
from k4w.infra import packer_hcl
from k4w.infra.errors import ToolMissing
from k4w.infra.tools import INSTALL

SYSTEM_ACCOUNT = "NT AUTHORITY\\SYSTEM"   # runAsUserName of sig-windows-tools' HostProcess manifests
PSA_ENFORCE = "pod-security.kubernetes.io/enforce"
PSA_ENFORCE_VERSION = "pod-security.kubernetes.io/enforce-version"
SERVICES_VARIABLE = "K4W_NODE_SERVICES"   # k4w/derive/step_env.py, read by 08-node-services.ps1
DAEMON_SERVICES = ("flanneld", "kube-proxy")
POD_TEMPLATE_KINDS = ("DaemonSet", "Deployment", "StatefulSet", "ReplicaSet", "Job")
# Flags that would give a DaemonSet a credential file instead of its projected ServiceAccount token.
# HostProcess containers are stable from Kubernetes 1.26 (kubernetes/enhancements
# keps/sig-windows/1981-windows-privileged-container-support/kep.yaml, stable: v1.26).
HOSTPROCESS_GA = (1, 26)
CREDENTIAL_FLAGS = {"flanneld": ("--kubeconfig-file",), "kube-proxy": ("--kubeconfig", "--master")}


def check(out: Path, expected, cluster=None) -> list[str]:
    problems = check_hostprocess_pods(out) + check_no_service_identities(out)
    for path in sorted((out / "manifests").glob("windows-*/*.yaml")):
        docs = _docs(path, problems)
        problems += check_recipe_manifest(path, docs, expected, cluster, _pinned_image(cluster))
        problems += check_schema_at_cluster_minor(path, docs, cluster)
    if cluster is not None:
        problems += check_node_services(out, cluster)
    return problems


# ------------------------------------------------------------------ who may be HostProcess

def pod_spec(doc: dict) -> dict | None:
    """The pod spec of a Pod or of a workload's pod template (POD_TEMPLATE_KINDS); None for other kinds."""
    if doc.get("kind") == "Pod":
        return doc.get("spec") or {}
    if doc.get("kind") in POD_TEMPLATE_KINDS:
        return ((doc.get("spec") or {}).get("template") or {}).get("spec") or {}
    return None


def _host_process(spec: dict) -> bool:
    def flag(context) -> bool:
        return bool(((context or {}).get("windowsOptions") or {}).get("hostProcess"))
    containers = (spec.get("containers") or []) + (spec.get("initContainers") or [])
    return flag(spec.get("securityContext")) or any(flag(c.get("securityContext")) for c in containers)


def check_hostprocess_pods(out: Path) -> list[str]:
    """A HostProcess pod anywhere but the allowed DaemonSets in their namespace is a problem."""
    allowed = {(identities.HOSTPROCESS_NAMESPACE, d.daemonset) for d in identities.HOSTPROCESS_DAEMONSETS}
    problems: list[str] = []
    manifests = out / "manifests"
    for path in sorted(manifests.glob("*.yaml")) + sorted(manifests.glob("windows-*/*.yaml")):
        for doc in _docs(path, []):
            spec = pod_spec(doc)
            if spec is None or not _host_process(spec):
                continue
            meta = doc.get("metadata") or {}
            key = (meta.get("namespace", "default"), meta.get("name"))
            if doc.get("kind") != "DaemonSet" or key not in allowed:
                problems.append(f"{_rel(path, out)}: {doc.get('kind')} {key[0]}/{key[1]} is a HostProcess pod (host-level: SYSTEM on "
                                f"the node); only {sorted(f'{n}/{d}' for n, d in allowed)} may be (k4w/derive/identities.py)")
    return problems


# ------------------------------------------------------------------ the recipe's manifest

def check_recipe_manifest(path: Path, docs: list[dict], exp, cluster, pinned: str | None) -> list[str]:
    where = _rel(path, path.parents[1].parent)
    problems: list[str] = []
    ns = identities.HOSTPROCESS_NAMESPACE

    def find(kind: str, name: str, namespace: str | None = ns) -> dict | None:
        return next((d for d in docs if d.get("kind") == kind and (d.get("metadata") or {}).get("name") == name
                     and (namespace is None or (d.get("metadata") or {}).get("namespace") == namespace)), None)

    namespace = find("Namespace", ns, None)
    labels = ((namespace or {}).get("metadata") or {}).get("labels") or {}
    if namespace is None:
        problems.append(f"{where}: no Namespace {ns}: the DaemonSets' namespace must state its Pod Security level")
    elif labels.get(PSA_ENFORCE) != "privileged" or not labels.get(PSA_ENFORCE_VERSION):
        problems.append(f"{where}: Namespace {ns} must set {PSA_ENFORCE}: privileged and {PSA_ENFORCE_VERSION} explicitly "
                        f"(HostProcess pods are admitted by the privileged level only), has {labels}")
    for doc in docs:
        kind, meta = doc.get("kind"), doc.get("metadata") or {}
        if kind == "Secret":
            problems.append(f"{where}: Secret {meta.get('name')}: the DaemonSets use projected ServiceAccount tokens, no Secret")
        if kind not in ("Namespace", "ClusterRoleBinding") and meta.get("namespace") != ns:
            problems.append(f"{where}: {kind} {meta.get('name')} is in namespace {meta.get('namespace')!r}, not {ns}")

    configmap = find("ConfigMap", identities.HOSTPROCESS_CONFIGMAP) or {}
    data = configmap.get("data") or {}
    if not configmap:
        problems.append(f"{where}: no ConfigMap {identities.HOSTPROCESS_CONFIGMAP} with the start scripts")
    for entry in identities.HOSTPROCESS_DAEMONSETS:
        problems += _check_daemonset(where, find("DaemonSet", entry.daemonset), entry, data, docs, exp, cluster, pinned)
    return problems


def _check_daemonset(where: str, ds: dict | None, entry, data: dict, docs: list[dict], exp, cluster, pinned: str | None) -> list[str]:
    ident = entry.identity
    name = f"{where}: DaemonSet {entry.daemonset}"
    if ds is None:
        return [f"{where}: no DaemonSet {entry.daemonset} ({ident.component} of the Windows nodes)"]
    problems: list[str] = []
    spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
    windows = ((spec.get("securityContext") or {}).get("windowsOptions") or {})
    if not windows.get("hostProcess") or windows.get("runAsUserName") != SYSTEM_ACCOUNT:
        problems.append(f"{name}: pod securityContext.windowsOptions must be hostProcess: true, runAsUserName "
                        f"{SYSTEM_ACCOUNT!r} (is {windows})")
    if spec.get("hostNetwork") is not True:
        problems.append(f"{name}: hostNetwork must be true (a HostProcess pod is in the host's network)")
    os_label = getattr(exp, "os_label", None) or "kubernetes.io/os"
    if (spec.get("nodeSelector") or {}).get(os_label) != "windows":
        problems.append(f"{name}: nodeSelector must select {os_label}: windows (is {spec.get('nodeSelector')})")
    if spec.get("serviceAccountName") != ident.service_account:
        problems.append(f"{name}: serviceAccountName is {spec.get('serviceAccountName')!r}, its own identity is {ident.service_account!r}")
    if spec.get("automountServiceAccountToken") is False:
        problems.append(f"{name}: automountServiceAccountToken is false: it would have no credentials but a file on the node")
    account = next((d for d in docs if d.get("kind") == "ServiceAccount" and d["metadata"].get("name") == ident.service_account), None)
    if account is None:
        problems.append(f"{name}: no ServiceAccount {ident.service_account}")
    roles = sorted({(d.get("roleRef") or {}).get("name") for d in docs if d.get("kind") in ("ClusterRoleBinding", "RoleBinding")
                    and any(s.get("kind") == "ServiceAccount" and s.get("name") == ident.service_account
                            and s.get("namespace") == ident.namespace for s in d.get("subjects") or [])})
    if roles != [ident.cluster_role]:
        problems.append(f"{name}: {ident.service_account} is bound to {roles or 'nothing'}, its Linux twin has exactly {ident.cluster_role!r}")
    for volume in spec.get("volumes") or []:
        if "secret" in volume or "hostPath" in volume:
            problems.append(f"{name}: volume {volume.get('name')} is a {'secret' if 'secret' in volume else 'hostPath'}: "
                            "the pod reads the node's files as SYSTEM already, and holds no secret")
    containers = spec.get("containers") or []
    for container in containers + (spec.get("initContainers") or []):
        image = str(container.get("image", ""))
        if "@sha256:" not in image or (pinned and image != pinned):
            problems.append(f"{name}: image {image!r} must be the HostProcess base image pinned by digest in the box profile "
                            f"(hostprocess.image{': ' + pinned if pinned else ''})")
        for env in container.get("env") or []:
            source = env.get("valueFrom") or {}
            if "secretKeyRef" in source:
                problems.append(f"{name}: env {env.get('name')} reads a Secret")
        env = {e.get("name"): e for e in container.get("env") or []}
        if ((env.get("NODE_IP") or {}).get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath") != "status.hostIP":
            problems.append(f"{name}: env NODE_IP must come from status.hostIP (the node's InternalIP, the kubelet's --node-ip)")
        api_ip = str(cluster.network.api_ip) if cluster is not None else None
        if api_ip and (env.get("KUBERNETES_SERVICE_HOST") or {}).get("value") != api_ip:
            problems.append(f"{name}: env KUBERNETES_SERVICE_HOST must be the API server's address {api_ip} (the ClusterIP "
                            "needs kube-proxy, which needs Flannel's network first)")
        command = " ".join(str(c) for c in container.get("command") or [])
        if entry.script not in command:
            problems.append(f"{name}: the container does not run {entry.script} (command {command!r})")
    if not containers:
        problems.append(f"{name}: no container")
    for key in (entry.script, identities.HOSTPROCESS_LIBRARY, entry.args_key):
        if key not in data:
            problems.append(f"{where}: ConfigMap {identities.HOSTPROCESS_CONFIGMAP} has no {key} for {entry.daemonset}")
    problems += _check_args(where, ident.component, str(data.get(entry.args_key, "")), exp)
    problems += check_probes(name, containers, data, cluster)
    return problems


# ------------------------------------------------------------------ probes

PROBES = ("readinessProbe", "livenessProbe", "startupProbe")
_SCRIPT = re.compile(r"[\w.-]+\.ps1", re.I)
# `. (Join-Path $PSScriptRoot 'x.ps1')`, `. (Join-Path $NodeDir 'x.ps1')`, `. .\x.ps1`: the file a line dot-sources.
_DOT_SOURCE = re.compile(r"^\s*\.\s+.*?([\w.-]+\.ps1)", re.I | re.M)


def _script_text(name: str, data: dict, cluster) -> str | None:
    """A script a probe runs: from the ConfigMap, else the box's copy under guest/windows/."""
    if name in data:
        return str(data[name])
    guest = cluster.sources.guest if cluster is not None else None
    if guest is None:
        from k4w.infra import sources
        guest = sources.REPO.guest
    found = sorted(Path(guest).rglob(name))
    return found[0].read_text(encoding="utf-8") if found else None


def _adds_types(text: str) -> bool:
    from . import powershell_rules

    stack = [powershell_rules.parse(text.encode("utf-8")).root_node]
    while stack:
        node = stack.pop()
        if node.type == "command_name" and node.text.decode("utf-8", "replace").lower() == "add-type":
            return True
        stack.extend(node.children)
    return False


def check_probes(name: str, containers: list[dict], data: dict, cluster) -> list[str]:
    """No probe compiles C#: not in its command, its script, or what that script dot-sources."""
    problems = []
    for container in containers:
        for kind in PROBES:
            command = [str(c) for c in (((container.get(kind) or {}).get("exec") or {}).get("command") or [])]
            if not command:
                continue
            what = f"{name}: container {container.get('name')} {kind}"
            if _adds_types(" ".join(command)) or any("add-type" in c.lower() for c in command):
                problems.append(f"{what} calls Add-Type in its command")
            queue = [m.group(0) for c in command for m in _SCRIPT.finditer(c)]
            seen: set[str] = set()
            while queue:
                script = queue.pop(0)
                if script in seen:
                    continue
                seen.add(script)
                text = _script_text(script, data, cluster)
                if text is None:
                    problems.append(f"{what} runs {script}, which is neither in the ConfigMap nor under guest/windows/")
                    continue
                if _adds_types(text):
                    problems.append(f"{what} runs {script}, which calls Add-Type: the kubelet starts a new powershell.exe "
                                    "every period and each compiles C# again; make the probe a file or process check")
                queue += _DOT_SOURCE.findall(text)
    return problems


def _pinned_image(cluster) -> str | None:
    """The base image the recipe's box profile pins (render checks that its boxes agree)."""
    if cluster is None:
        return None
    prof = next((p for p in cluster.profiles.values() if identities.runs_hostprocess(p)), None)
    return str(prof.data["hostprocess"].get("image")) if prof is not None else None


def _check_args(where: str, component: str, text: str, exp) -> list[str]:
    """The flags the start script passes: agreement with the cluster, node values from the node, no
    credential file."""
    args: dict[str, str] = {}
    for line in text.splitlines():
        flag, _, value = line.strip().partition("=")
        if flag:
            args[flag] = value
    network = "cbr0" if getattr(exp, "backend", "vxlan") == "host-gw" else "vxlan0"
    wants = {"flanneld": {"--kube-subnet-mgr": "", "--iface": "${NODE_IP}"},
             "kube-proxy": {"--hostname-override": "${NODE_NAME}", "--proxy-mode": "kernelspace", "--network-name": network,
                            "--cluster-cidr": getattr(exp, "pod_cidr", None), "--source-vip": "${SOURCE_VIP}"}}[component]
    problems = []
    for flag, want in wants.items():
        if want is not None and args.get(flag) != want:
            problems.append(f"{where}: {component}.args: {flag} is {args.get(flag)!r}, must be {want!r}")
    for flag in CREDENTIAL_FLAGS[component]:
        if flag in args:
            problems.append(f"{where}: {component}.args passes {flag}: the DaemonSet's own projected ServiceAccount token "
                            "(in-cluster configuration) is its only credential, never a file on the node such as the kubelet's")
    return problems


# ------------------------------------------------------------------ schema at the cluster's minor

def check_schema_at_cluster_minor(path: Path, docs: list[dict], cluster) -> list[str]:
    """kubernetes-validate at the pinned Kubernetes minor (strict): HostProcess fields are checked
    against the API the cluster really serves, not only the oldest bundled schema."""
    if cluster is None:
        return []
    try:
        import kubernetes_validate
        from kubernetes_validate import utils as kv_utils
    except ImportError as exc:
        raise ToolMissing("kubernetes-validate", INSTALL["kubernetes-validate"]) from exc
    major, minor = cluster.kube.minor
    if (major, minor) < HOSTPROCESS_GA:
        return [f"{path.name}: the master's profile pins Kubernetes {cluster.kube.version}, whose API server has no stable "
                f"HostProcess pods (GA in {'.'.join(map(str, HOSTPROCESS_GA))}, KEP 1981): a Windows box with hostprocess: "
                "needs a master of its own era"]
    version = f"{major}.{minor}.0"
    if version not in kv_utils.all_versions():
        return [f"{path.name}: kubernetes-validate has no schema for Kubernetes {major}.{minor} (it has "
                f"{kv_utils.all_versions()[0]}..{kv_utils.all_versions()[-1]}): upgrade it"]
    problems = []
    for doc in docs:
        name = f"{path.name}: {doc.get('kind', '?')}/{(doc.get('metadata') or {}).get('name', '?')}"
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = "/".join(str(p) for p in exc.absolute_path) or "(top)"
            problems.append(f"{name}: kubernetes-validate {version} (strict): {where}: {exc.message}")
    return problems


# ------------------------------------------------------------------ no services of theirs on the node

def check_node_services(out: Path, cluster) -> list[str]:
    """Each box whose flanneld and kube-proxy are DaemonSets registers neither as a Windows service:
    its rendered Packer template's K4W_NODE_SERVICES names neither."""
    problems = []
    for box, prof in cluster.profiles.items():
        if not (prof.is_windows and identities.runs_hostprocess(prof)):
            continue
        template = out / packer_hcl.rel_path(box)
        if not template.is_file():
            continue  # the Packer validator names a template that was not rendered
        # Every provisioner carries the step environment: judge each occurrence.
        values = re.findall(rf'"{SERVICES_VARIABLE}=([^"]*)"', template.read_text(encoding="utf-8"))
        services = sorted({s.strip() for value in values for s in value.split(",") if s.strip()})
        if not values:
            problems.append(f"{packer_hcl.rel_path(box)}: sets no {SERVICES_VARIABLE}, so 08-node-services.ps1 cannot tell which "
                            "Windows services this box registers")
        wrong = [s for s in services if s in DAEMON_SERVICES]
        if wrong:
            problems.append(f"{packer_hcl.rel_path(box)}: {SERVICES_VARIABLE} registers {', '.join(wrong)} as Windows services, but "
                            f"box {box} runs them as HostProcess DaemonSets (hostprocess: in its profile): node_services must be kubelet only")
    return problems


def all_windows_nodes_hostprocess(out: Path) -> bool:
    """Whether the rendered cluster has Windows nodes and each says (node.json node_daemons) that its
    flanneld and kube-proxy are HostProcess DaemonSets."""
    kinds = []
    for info in sorted((out / "nodes").glob("*/node.json")):
        try:
            kinds.append((json.loads(info.read_text(encoding="utf-8")) or {}).get("node_daemons"))
        except (OSError, ValueError, AttributeError):
            return False  # manifest_rules names a broken node.json
    return bool(kinds) and all(kind == "hostprocess" for kind in kinds)


def check_no_service_identities(out: Path) -> list[str]:
    """A cluster whose every Windows node runs HostProcess DaemonSets carries no seed-era token
    Secrets: they would be long-lived credentials nothing uses."""
    rbac = out / "manifests" / identities.SERVICE_IDENTITIES_MANIFEST
    if rbac.is_file() and all_windows_nodes_hostprocess(out):
        return [f"manifests/{rbac.name}: rendered, but every Windows node runs flanneld and kube-proxy as HostProcess "
                "DaemonSets with projected tokens: its non-expiring token Secrets would be credentials nothing uses"]
    return []


# ------------------------------------------------------------------ helpers

def _docs(path: Path, problems: list[str]) -> list[dict]:
    try:
        return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if isinstance(d, dict)]
    except (OSError, yaml.YAMLError) as exc:
        problems.append(f"{path.name}: not readable YAML: {exc}")
        return []


def _rel(path: Path, out: Path) -> str:
    try:
        return path.relative_to(out).as_posix()
    except ValueError:
        return path.name
