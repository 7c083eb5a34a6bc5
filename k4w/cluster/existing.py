"""Join workers to a cluster k4w did not create (cluster.existing): the join-only cluster-up, its plan,
and the cluster-reset that removes exactly what k4w added.

Order, all through the API with the admin kubeconfig (k4w.cluster.kubeapi), before any VM starts:
1. read the cluster's facts and refuse a cluster.yml that does not fit (k4w.cluster.facts), and a node name
   the cluster already has that this installation did not join (joining would take that Node over);
2. check what a join relies on and k4w never changes: kubeadm's bootstrap-token RBAC (a cluster made by
   kubeadm or kubespray has it), the ClusterRoles the Windows identities bind to, and that the
   cluster's own kube-proxy and Flannel DaemonSets stay off Windows nodes (k4w does not patch them);
then the VM steps of a k4w cluster (up, cluster NICs, their IPs, the node proxy), and:
3. apply the objects the Windows workers need, each recorded in OUT/existing-cluster.json the moment it
   exists: created if absent, else (k4w's only) replaced when its content-sha256 annotation differs, and
   this installation added to its k4w.io/installations annotation: on the containerd era the rendered HostProcess
   manifest (OUT/manifests/windows-containerd/: the k4w-windows-node Namespace, a ServiceAccount and a
   ClusterRoleBinding each for flanneld and kube-proxy, the scripts ConfigMap, the two DaemonSets,
   their API address filled in from cluster-info); on the seed era OUT/manifests/windows-node-rbac.yaml
   (a ServiceAccount, its token Secret and a ClusterRoleBinding for flanneld and for kube-proxy);
4. a bootstrap token per join (k4w.cluster.bootstrap_token, recorded too) and the CA hash from cluster-info
   for the joins, which run the same join scripts as a k4w cluster; after each Linux join, the cluster's
   own flanneld on it steered to the cluster NIC (k4w.cluster.flannel_address);
5. wait for the nodes to be Ready, deleting each node's token once it is. A Node is recorded once its join
   made it (the name was free just before).
cluster-reset deletes this installation's Nodes (labelled k4w.io/installation=<its id>, k4w.derive.node_marks) and
token, and each recorded shared object no other installation uses (INSTALLATIONS, and no k4w node of
another installation left), newest first, and nothing else.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
import re
from typing import Annotated

import yaml
from pydantic import AfterValidator, StrictStr

from k4w.infra import documents
from k4w.derive import identities, node_marks
from k4w.outdir import private
from k4w.infra import ui
from k4w.derive.cluster import Cluster
from k4w.infra.errors import K4wError
from k4w.cluster.kubeapi import ApiError, Client, load_kubeconfig
from k4w.model.version_skew import minor
from k4w.render import hostprocess
from k4w.cluster import api_models as M
from k4w.cluster import facts as facts_mod
from k4w.cluster import flannel_address
from k4w.cluster import steps as S
# Re-exported: callers and tests name them existing.X, as before the API reads moved to existing_api.
from k4w.cluster.existing_api import cluster_info, endpoint, join_parameters, join_token, node_conditions  # noqa: F401

RECORD_FILE = "existing-cluster.json"
# The seed era's token-Secret identities (services on the node); the containerd era's HostProcess
# manifests are under manifests/<recipe folder>/ (k4w.render.hostprocess).
SEED_MANIFEST = Path("manifests") / identities.SERVICE_IDENTITIES_MANIFEST
# HostProcess containers are stable from Kubernetes 1.26 (KEP 1981, kubernetes/enhancements@0e2bafdd
# keps/sig-windows/1981-windows-privileged-container-support/kep.yaml, milestone stable "v1.26").
HOSTPROCESS_MIN = (1, 26)
# The DaemonSets' env that names the API server (templates/manifests/windows-containerd/: the address,
# not the kubernetes Service's ClusterIP); on an existing cluster it is cluster-info's, known only then.
API_HOST_ENV, API_PORT_ENV = "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"
PART_OF = ("app.kubernetes.io/part-of", "k4w")
# On each object k4w applies from its manifests, shared by every k4w installation (one --out each, e.g. one
# per host) whose nodes joined the cluster: which installations use it (comma-separated ids, k4w.derive.node_marks
# INSTALLATION_LABEL's values), and the sha256 of the content k4w applied, so that a changed manifest
# (scripts, flags, image digest) replaces the object an older k4w applied. Annotations, not labels: a
# label holds one value and a selector has no use for them.
INSTALLATIONS = "k4w.io/installations"
CONTENT_SHA256 = "k4w.io/content-sha256"
# What `kubeadm join` with a bootstrap token relies on in the cluster (kubernetes/kubernetes@v1.37.2, as at v1.35.4
# cmd/kubeadm/app/constants/constants.go: NodeKubeletBootstrap, GetNodesClusterRoleName,
# NodeAutoApproveBootstrapClusterRoleBinding; KubeletBaseConfigMapRole is a Role in kube-system).
KUBEADM_JOIN_RBAC = (
    ("ClusterRoleBinding", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/kubeadm:kubelet-bootstrap"),
    ("ClusterRoleBinding", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/kubeadm:get-nodes"),
    ("ClusterRoleBinding", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/kubeadm:node-autoapprove-bootstrap"),
    ("RoleBinding", "/apis/rbac.authorization.k8s.io/v1/namespaces/kube-system/rolebindings/kubeadm:kubelet-config"),
)
# The REST collection of each kind k4w applies (only these).
COLLECTIONS = {
    ("v1", "Namespace"): "/api/v1/namespaces",
    ("v1", "ServiceAccount"): "/api/v1/namespaces/{namespace}/serviceaccounts",
    ("v1", "Secret"): "/api/v1/namespaces/{namespace}/secrets",
    ("v1", "ConfigMap"): "/api/v1/namespaces/{namespace}/configmaps",
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    ("apps/v1", "DaemonSet"): "/apis/apps/v1/namespaces/{namespace}/daemonsets",
}
OS_LABEL = "kubernetes.io/os"


def client(cluster: Cluster) -> Client:
    return Client(load_kubeconfig(cluster.config.cluster.existing))


# ------------------------------------------------------------------ what k4w applies, and where

def object_path(doc: dict) -> str:
    """The REST path of one object of the manifest (its collection, then its name)."""
    key = (doc.get("apiVersion"), doc.get("kind"))
    if key not in COLLECTIONS:
        raise K4wError(f"k4w applies no {doc.get('kind')} ({doc.get('apiVersion')}) to an existing cluster")
    meta = doc.get("metadata") or {}
    return COLLECTIONS[key].format(namespace=meta.get("namespace", "default")) + "/" + meta["name"]


def windows_manifests(cluster: Cluster, artifacts: Path, files: dict[str, str] | None = None) -> list[Path]:
    """The rendered manifests (relative to OUT) the cluster's Windows workers need: the seed era's
    identities for a node whose flanneld and kube-proxy are services, each HostProcess recipe's
    manifests for the others; none without Windows workers."""
    windows = [cluster.profile(n.box) for n in cluster.config.nodes if cluster.profile(n.box).is_windows]
    found = [SEED_MANIFEST] if any(not identities.runs_hostprocess(p) for p in windows) else []
    for folder, profs in hostprocess.recipe_profiles(cluster).items():
        if any(identities.runs_hostprocess(p) for p in profs):
            folder_path = Path("manifests") / folder
            names = ([Path(k).name for k in files if Path(k).parent == folder_path] if files is not None
                     else [p.name for p in (Path(artifacts) / folder_path).glob("*.yaml")])
            if not names:
                raise K4wError(f"no manifests in {Path(artifacts) / folder_path}: run `invoke render`")
            found += [folder_path / name for name in sorted(names)]
    return found


def windows_objects(artifacts: Path, cluster: Cluster, files: dict[str, str] | None = None) -> list[dict]:
    """The objects of windows_manifests, read from OUT (or from the in-memory render `files`), in order."""
    docs: list[dict] = []
    for manifest in windows_manifests(cluster, artifacts, files):
        path = Path(artifacts) / manifest
        try:
            text = files[manifest.as_posix()] if files is not None else path.read_text(encoding="utf-8")
            docs += [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]
        except (OSError, KeyError, yaml.YAMLError) as exc:
            raise K4wError(f"cannot read {path} ({exc}): run `invoke render`") from None
    return docs


def with_api_endpoint(docs: list[dict], host_port: str) -> list[dict]:
    """The docs with k4w's DaemonSets told the API server's address (cluster-info's host:port): the
    render cannot know it for a cluster k4w did not make (derive leaves network.api_ip empty)."""
    host, _, port = host_port.rpartition(":")
    values = {API_HOST_ENV: host.strip("[]"), API_PORT_ENV: port}
    for doc in docs:
        if doc.get("kind") != "DaemonSet":
            continue
        spec = ((doc.get("spec") or {}).get("template") or {}).get("spec") or {}
        for container in (spec.get("containers") or []) + (spec.get("initContainers") or []):
            for env in container.get("env") or []:
                if env.get("name") in values:
                    env["value"] = values[env["name"]]
    return docs


def is_k4ws(doc: dict) -> bool:
    return ((doc.get("metadata") or {}).get("labels") or {}).get(PART_OF[0]) == PART_OF[1]


def describe(doc: dict) -> str:
    meta = doc.get("metadata") or {}
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{doc.get('kind')} {where}{meta.get('name')}"


# ------------------------------------------------------------------ the record of what k4w added

def _matching(pattern: str, what: str):
    def check(value: str) -> str:
        if not re.fullmatch(pattern, value) or ".." in value:
            raise ValueError(f"not {what}")
        return value
    return AfterValidator(check)


class RecordedObject(M.Shape):
    kind: StrictStr
    name: StrictStr
    # cluster-reset DELETEs it: a path of the API (COLLECTIONS, bootstrap_token) and nothing else
    path: Annotated[StrictStr, _matching(r"/apis?/[A-Za-z0-9./:_-]+", "an API object path")]


class RecordFile(M.Shape):
    """What Record.save writes."""

    server: StrictStr
    objects: list[RecordedObject]
    # a Node name (a DNS subdomain, core/v1): cluster-reset DELETEs /api/v1/nodes/<name>
    nodes: list[Annotated[StrictStr, _matching(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", "a Node name")]]


class Record:
    """OUT/existing-cluster.json: the API server and every object k4w created there, in order."""

    def __init__(self, out: Path, server: str, installation: str | None = None):
        self.path = Path(out) / RECORD_FILE
        self.data = {"server": server, "installation": installation, "objects": [], "nodes": []}
        if self.path.is_file():
            source = f"{self.path} (k4w's record of what it added; delete it only once those objects are gone)"
            self.data = documents.json_value(self.path.read_text(encoding="utf-8"), source)
            documents.parse(RecordFile, self.data, source)
            if self.data.get("server") != server:
                raise K4wError(f"{self.path} records objects k4w made on {self.data.get('server')}, not on {server}; "
                               "run `invoke cluster-reset` with the config that made them first")
            if installation and not self.data.get("installation"):   # a record from before installations
                self.data["installation"] = installation

    @property
    def installation(self) -> str | None:
        return self.data.get("installation")

    def add(self, kind: str, path: str, name: str, shared: bool = True) -> None:
        """shared: an object of k4w's manifests, which other installations may use too (INSTALLATIONS);
        else this installation's own (its bootstrap token)."""
        if not any(o["path"] == path for o in self.data["objects"]):
            self.data["objects"].append({"kind": kind, "name": name, "path": path, "shared": shared})
            self.save()

    def add_node(self, name: str) -> None:
        """Only a Node this installation's join made (join_step makes sure it was not there before)."""
        if name not in self.data["nodes"]:
            self.data["nodes"].append(name)
            self.save()

    def save(self) -> None:
        # One rename, never through a link, owner-only with the ACL NTFS needs (k4w.outdir.private): it names
        # what k4w changed in the user's cluster, which only its owner's cluster-reset should act on.
        private.write_private(self.path, json.dumps(self.data, indent=2) + "\n")


# ------------------------------------------------------------------ checks before anything changes

def _stays_off_windows(ds: dict) -> bool:
    """Whether a DaemonSet's pods can never land on a Windows node (nodeSelector or required node
    affinity on kubernetes.io/os = linux)."""
    spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
    if (spec.get("nodeSelector") or {}).get(OS_LABEL) == "linux":
        return True
    terms = ((((spec.get("affinity") or {}).get("nodeAffinity") or {})
              .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or [])
    return bool(terms) and all(any(e.get("key") == OS_LABEL and e.get("operator") == "In" and e.get("values") == ["linux"]
                                   for e in t.get("matchExpressions") or []) for t in terms)


def prerequisites(api: Client, docs: list[dict], windows: bool, version: str | None = None) -> list[str]:
    """What the join needs and k4w leaves to the cluster's owner, each missing one named; an object k4w
    would apply that exists and is not k4w's; an API server (version) too old for HostProcess pods."""
    problems = []
    api_get_optional = api.get_optional

    def get_optional(path: str) -> dict | None:   # every object read here held to what is read of it
        there = api_get_optional(path)
        if there is not None:
            documents.parse(M.AnyObject, there, f"GET {api.creds.server}{path}")
        return there

    hostprocess_pods = [describe(d) for d in docs if d.get("kind") == "DaemonSet"]
    if hostprocess_pods and version and minor(version) < HOSTPROCESS_MIN:
        problems.append(f"Kubernetes version: the API server is {version}; the Windows workers run flanneld and kube-proxy as "
                        f"HostProcess pods ({', '.join(hostprocess_pods)}), stable from {'.'.join(map(str, HOSTPROCESS_MIN))} (KEP 1981)")
    for doc in docs:
        there = get_optional(object_path(doc))
        if there is not None and not is_k4ws(there):
            problems.append(f"{describe(doc)} already exists and is not k4w's (no label {PART_OF[0]}: {PART_OF[1]}); "
                            "k4w does not change objects it did not make: rename or remove it")
        elif there is not None and (there.get("metadata") or {}).get("deletionTimestamp"):
            # A Namespace being emptied after a cluster-reset refuses new objects in it (HTTP 403).
            problems.append(f"{describe(doc)} is still being deleted (a cluster-reset moments ago): run cluster-up again once it is gone")
    for kind, path in KUBEADM_JOIN_RBAC:
        if api.get_optional(path) is None:
            problems.append(f"{kind} {path.rsplit('/', 1)[1]} is missing: `kubeadm join` with a bootstrap token needs kubeadm's "
                            "node RBAC (made by `kubeadm init phase bootstrap-token`)")
    for doc in docs:
        role = (doc.get("roleRef") or {}).get("name")
        if doc.get("kind") == "ClusterRoleBinding" and role and \
                api.get_optional(f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{role}") is None:
            problems.append(f"ClusterRole {role} is missing: {describe(doc)} binds a Windows component to the rights of its "
                            "Linux twin, and the cluster has no such role")
    if windows:
        for ds in daemonsets(api):
            meta = ds.get("metadata") or {}
            name = meta.get("name", "")
            if (name == "kube-proxy" or "flannel" in name) and not is_k4ws(ds) and not _stays_off_windows(ds):
                problems.append(f"DaemonSet {meta.get('namespace')}/{name} has no nodeSelector {OS_LABEL}: linux, so its Linux pods "
                                "would be scheduled onto the Windows nodes; k4w does not change the cluster's DaemonSets: add it "
                                f"(kubectl -n {meta.get('namespace')} patch daemonset {name} -p "
                                "'{\"spec\":{\"template\":{\"spec\":{\"nodeSelector\":{\"kubernetes.io/os\":\"linux\"}}}}}')")
    return problems


def _is_ours(name: str, labels: dict, installation: str | None, recorded: list[str]) -> bool:
    """A Node this installation joined: labelled so by its kubelet, or recorded after its join and unlabelled."""
    theirs = labels.get(node_marks.INSTALLATION_LABEL)
    return (installation is not None and theirs == installation) or (theirs is None and name in recorded)


def name_collisions(facts: facts_mod.Facts, cluster: Cluster, installation: str | None = None,
                    recorded: list[str] = ()) -> list[str]:
    """Each cluster.yml node whose name a Node of the cluster already has that this installation did not
    join: joining would fail (another kubelet's certificate is bound to it) or take over that Node, and
    cluster-reset would then delete the owner's Node."""
    problems = []
    for node in cluster.config.nodes:
        labels = facts.node_labels.get(node.name)
        if node.name in facts.nodes and not _is_ours(node.name, labels or {}, installation, list(recorded)):
            owner = labels.get(node_marks.INSTALLATION_LABEL) if labels else None
            whose = f"another k4w installation's ({node_marks.INSTALLATION_LABEL}={owner})" if owner else "not one k4w joined from this --out"
            problems.append(f"node name {node.name}: the cluster already has a Node {node.name}, {whose}; "
                            "rename it in cluster.yml nodes[] (a join would take that Node over, and cluster-reset would delete it)")
    return problems


def foreign_windows_nodes(facts: facts_mod.Facts) -> list[str]:
    """Windows nodes of the cluster that k4w did not join (no k4w.io/node label)."""
    key, value = node_marks.NODE_LABEL
    return [name for name, labels in facts.node_labels.items()
            if any(k.endswith("kubernetes.io/os") and v == "windows" for k, v in labels.items()) and labels.get(key) != value]


def check(api: Client, cluster: Cluster, artifacts: Path, installation: str | None = None,
          recorded: list[str] = ()) -> facts_mod.Facts:
    """Refuse, before any VM starts, a cluster.yml that does not fit or a cluster a join would fail on."""
    facts = facts_mod.check(api, cluster)
    docs = windows_objects(artifacts, cluster)
    problems = name_collisions(facts, cluster, installation, recorded)
    problems += prerequisites(api, docs, bool(docs), facts.version) + facts_mod.netconf_mismatches(facts, artifacts)
    if problems:
        raise K4wError(f"the existing cluster at {facts.server} lacks what the join needs (nothing was started or changed):\n"
                       + "\n".join(f"  - {p}" for p in problems))
    return facts


# ------------------------------------------------------------------ applying and removing

def content_sha256(doc: dict) -> str:
    """The digest of what k4w applies, without its own annotations (canonical JSON)."""
    bare = json.loads(json.dumps(doc))
    annotations = (bare.get("metadata") or {}).get("annotations") or {}
    for key in (INSTALLATIONS, CONTENT_SHA256):
        annotations.pop(key, None)
    if "annotations" in (bare.get("metadata") or {}) and not annotations:
        del bare["metadata"]["annotations"]
    return hashlib.sha256(json.dumps(bare, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def installations_of(obj: dict) -> set[str]:
    value = ((obj.get("metadata") or {}).get("annotations") or {}).get(INSTALLATIONS) or ""
    return {i for i in value.split(",") if i}


def _marked(doc: dict, digest: str, users: set[str]) -> dict:
    body = json.loads(json.dumps(doc))
    body.setdefault("metadata", {}).setdefault("annotations", {}).update(
        {CONTENT_SHA256: digest, INSTALLATIONS: ",".join(sorted(users))})
    return body


def _set_installations(api: Client, path: str, users: set[str]) -> None:
    # A JSON merge patch of the one annotation (RFC 7386; the API server takes application/merge-patch+json).
    api.request("PATCH", path, {"metadata": {"annotations": {INSTALLATIONS: ",".join(sorted(users))}}},
                content_type="application/merge-patch+json")


# Fields the API server fills in or refuses to change, per kind, at k8s.io/kubernetes@v1.37.2:
# - a service-account token Secret's data (token, ca.crt, namespace) is written by the token controller
#   (pkg/controller/serviceaccount/tokens_controller.go); k4w's manifest has none, so a PUT of the manifest
#   would empty it and lock every node that uses the token out until the controller writes a new one;
# - a binding's roleRef (pkg/apis/rbac/validation ValidateRoleBindingUpdate / ValidateClusterRoleBindingUpdate:
#   "cannot change roleRef") and a DaemonSet's spec.selector (pkg/apis/apps/validation
#   ValidateDaemonSetSpecUpdate: "field is immutable") cannot be updated: such an object is deleted and made again.
SERVICE_ACCOUNT_TOKEN = "kubernetes.io/service-account-token"
SERVICE_ACCOUNT_UID = "kubernetes.io/service-account.uid"   # k8s.io/api core/v1 ServiceAccountUIDKey
IMMUTABLE = {"ClusterRoleBinding": ("roleRef",), "RoleBinding": ("roleRef",), "DaemonSet": ("spec", "selector")}


def _at(obj: dict, keys: tuple[str, ...]):
    for key in keys:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def _replace(api: Client, path: str, doc: dict, body: dict, there: dict) -> str:
    """Bring k4w's object at path to body (doc with k4w's annotations); returns the summary line."""
    kind = doc["kind"]
    if kind == "Secret" and doc.get("type") == SERVICE_ACCOUNT_TOKEN and "data" in there:
        body["data"] = there["data"]   # the controller's token stays valid (see SERVICE_ACCOUNT_TOKEN)
        # ... and so does the uid annotation it wrote beside the name k4w set (the token's claim names that uid).
        uid = ((there.get("metadata") or {}).get("annotations") or {}).get(SERVICE_ACCOUNT_UID)
        if uid:
            body["metadata"]["annotations"][SERVICE_ACCOUNT_UID] = uid
    fixed = IMMUTABLE.get(kind)
    if fixed and _at(there, fixed) != _at(doc, fixed):
        try:
            api.delete(path)
            api.create(path.rsplit("/", 1)[0], body)
        except ApiError as exc:
            raise K4wError(f"cannot make {describe(doc)} again with its new {'.'.join(fixed)}: {exc}") from None
        return f"made {describe(doc)} again (k4w's; an earlier k4w made it with another {'.'.join(fixed)}, which cannot change)"
    for attempt in (1, 2):
        body["metadata"]["resourceVersion"] = (there.get("metadata") or {}).get("resourceVersion")
        try:
            api.request("PUT", path, body)
            break
        except ApiError as exc:
            # 409: another writer (another installation's cluster-up) changed it since the GET: read it again, once.
            if exc.status != 409 or attempt == 2:
                raise K4wError(f"cannot update {describe(doc)}: {exc}") from None
            there = api.get(path)
            documents.parse(M.AnyObject, there, f"GET {api.creds.server}{path}")
    return f"updated {describe(doc)} (k4w's, applied by an earlier k4w with other content)"


def apply(api: Client, docs: list[dict], record: Record) -> list[str]:
    """Create each object that is not there; one that is must be k4w's (label app.kubernetes.io/part-of:
    k4w), never the cluster owner's: k4w replaces it when its content differs from what k4w applies now (an
    older k4w's scripts, flags or image), and adds this installation to those using it. Returns what
    happened to each, for the summary."""
    said = []
    installation = record.installation
    for doc in docs:
        path = object_path(doc)
        collection = path.rsplit("/", 1)[0]
        digest = content_sha256(doc)
        there = api.get_optional(path)
        if there is None:
            try:
                api.create(collection, _marked(doc, digest, {installation} - {None}))
                record.add(doc["kind"], path, describe(doc))
                said.append(f"created {describe(doc)}")
                continue
            except ApiError as exc:
                if exc.status != 409:
                    raise K4wError(f"cannot create {describe(doc)}: {exc}") from None
                there = api.get(path)   # made in between, e.g. by another installation's cluster-up
        documents.parse(M.AnyObject, there, f"GET {api.creds.server}{path}")
        if not is_k4ws(there):
            raise K4wError(f"{describe(doc)} already exists and is not k4w's (no label {PART_OF[0]}: {PART_OF[1]}); "
                           "k4w does not change objects it did not make: rename or remove it")
        users = installations_of(there) | ({installation} - {None})
        annotations = (there.get("metadata") or {}).get("annotations") or {}
        if annotations.get(CONTENT_SHA256) != digest:
            said.append(_replace(api, path, doc, _marked(doc, digest, users), there))
        elif users != installations_of(there):
            _set_installations(api, path, users)
            said.append(f"kept {describe(doc)} (k4w's, already there; now also used by installation {installation})")
        else:
            said.append(f"kept {describe(doc)} (k4w's, already there)")
        record.add(doc["kind"], path, describe(doc))
    return said


def daemonsets(api: Client) -> list[dict]:
    """Every DaemonSet of the cluster, held to what _stays_off_windows and the CNI row read of it."""
    path = "/apis/apps/v1/daemonsets"
    data = api.get(path)
    documents.parse(M.DaemonSetList, data, f"GET {api.creds.server}{path}")
    return data.get("items") or []


def other_installations_nodes(api: Client, installation: str | None, ours: list[str]) -> list[str]:
    """The k4w nodes (label k4w.io/node) of other installations: not recorded here, and not labelled ours."""
    key, value = node_marks.NODE_LABEL
    found = []
    for node in api.get(f"/api/v1/nodes?labelSelector={key}%3D{value}").get("items") or []:
        meta = node.get("metadata") or {}
        theirs = (meta.get("labels") or {}).get(node_marks.INSTALLATION_LABEL)
        if meta.get("name") not in ours and not (installation and theirs == installation):
            found.append(f"{meta.get('name')} ({theirs or 'no installation label'})")
    return found


def remove(api: Client, out: Path, dry_run: bool = False) -> list[str]:
    """Delete this installation's nodes and own objects (its token), and each recorded shared object no other
    installation uses (annotation INSTALLATIONS, and no other installation's k4w node left), newest first;
    forget the record when done. An object that is no longer k4w's, or a Node labelled another installation's,
    is never touched."""
    path = Path(out) / RECORD_FILE
    if not path.is_file():
        return []
    record = Record(out, api.creds.server)
    installation = record.installation
    said = []
    for name in record.data["nodes"]:
        node = api.get_optional(f"/api/v1/nodes/{name}")
        theirs = (((node or {}).get("metadata") or {}).get("labels") or {}).get(node_marks.INSTALLATION_LABEL)
        if node is None:
            said.append(f"Node {name} was already gone")
        elif theirs and installation and theirs != installation:
            said.append(f"kept Node {name}: it is labelled {node_marks.INSTALLATION_LABEL}={theirs}, another k4w installation's")
        elif dry_run:
            said.append(f"would delete Node {name}")
        elif api.delete(f"/api/v1/nodes/{name}"):
            said.append(f"deleted Node {name}")
    others = other_installations_nodes(api, installation, record.data["nodes"])
    for obj in reversed(record.data["objects"]):
        # Records from before this field: only the bootstrap token was this installation's own.
        shared = obj.get("shared", "/secrets/bootstrap-token-" not in obj["path"])
        there = api.get_optional(obj["path"]) if shared else None
        users = installations_of(there or {}) - {installation}
        if shared and there is None:
            said.append(f"{obj['name']} was already gone")
        elif shared and not is_k4ws(there):
            said.append(f"kept {obj['name']}: it is no longer k4w's (no label {PART_OF[0]}: {PART_OF[1]})")
        elif shared and (users or others):
            why = ", ".join([f"installation {u}" for u in sorted(users)] + [f"node {n}" for n in others])
            if dry_run:
                said.append(f"would keep {obj['name']} (still used by k4w's {why})")
            else:
                _set_installations(api, obj["path"], users)
                said.append(f"kept {obj['name']}: still used by k4w's {why}")
        elif dry_run:
            said.append(f"would delete {obj['name']}")
        elif api.delete(obj["path"]):
            said.append(f"deleted {obj['name']}")
        else:
            said.append(f"{obj['name']} was already gone")
    if not dry_run:
        path.unlink()
    return said


# ------------------------------------------------------------------ cluster-up and cluster-reset

def prepare(ctx, cluster: Cluster, api: Client | None = None) -> None:
    """Before any VM starts: the facts and prerequisites (GETs only, a dry run too), then the API and
    the record on the context for the steps."""
    ctx.api = api or client(cluster)
    ui.say(f"==> existing cluster: reading its facts through the API ({cluster.config.cluster.existing})", style="bold")
    ctx.record = (DryRunRecord if ctx.dry_run else Record)(ctx.out, ctx.api.creds.server)
    installation = ctx.state.installation(ctx.record.installation)
    ctx.record.data["installation"] = installation
    facts = check(ctx.api, cluster, ctx.rendered, installation, ctx.record.data["nodes"])
    ui.table(f"the existing cluster at {facts.server} fits cluster.yml", ["fact", "value (where read)"], facts.rows())
    foreign = foreign_windows_nodes(facts)
    if foreign:
        ui.say(f"note: the cluster's own Windows nodes {', '.join(foreign)} are not k4w's: k4w's Windows DaemonSets select "
               f"{node_marks.NODE_LABEL[0]}={node_marks.NODE_LABEL[1]} and stay off them; their network stays yours", style="yellow")
    if any(not cluster.profile(n.box).is_windows for n in cluster.config.nodes):
        ctx.flannel = flannel_address.find(ctx.api, is_k4ws)
        refused = ctx.flannel and ctx.flannel.unsteerable()
        if refused:
            raise K4wError(f"{refused} (nothing was started or changed)")
        if ctx.flannel is not None:
            ui.say(f"Flannel on k4w's Linux workers: {ctx.flannel.decision()}")
        else:
            ui.say(f"no DaemonSet in {' or '.join(flannel_address.NAMESPACES)} runs flanneld: k4w cannot tell which NIC "
                   "the cluster's Flannel takes on its Linux workers; it must be the cluster NIC (the node's InternalIP)",
                   style="yellow")
    ctx.windows_objects = with_api_endpoint(windows_objects(ctx.rendered, cluster), endpoint(ctx.api))


class DryRunRecord(Record):
    def save(self) -> None:   # a dry run writes nothing
        pass


def step_apply(ctx) -> None:
    docs = ctx.windows_objects
    if ctx.dry_run:
        for doc in docs:
            ui.say(f"would create {describe(doc)} if absent ({object_path(doc)}), or replace it if it is k4w's with "
                   f"another {CONTENT_SHA256}")
        return
    for line in apply(ctx.api, docs, ctx.record):
        ui.say(line)


def join_step(ctx, m, step) -> None:
    """Join one node, recording its Node only once this join made it: right before, the name must be free
    (or this installation's, on a rerun); right after, even when the join failed half-way, a Node of that
    name is the one the join registered."""
    path = f"/api/v1/nodes/{m.name}"
    node = ctx.api.get_optional(path)
    labels = ((node or {}).get("metadata") or {}).get("labels") or {}
    if node is not None and not _is_ours(m.name, labels, ctx.record.installation, ctx.record.data["nodes"]):
        raise K4wError(f"node name {m.name}: a Node {m.name} appeared in the cluster that this installation did not join; "
                       "rename the node in cluster.yml nodes[] (nothing of it was joined)")
    try:
        step(ctx, m)
    finally:
        if not ctx.dry_run and ctx.api.get_optional(path) is not None:
            ctx.record.add_node(m.name)


def step_list(info) -> list:
    """The recorded steps of a join-only cluster-up (steps.step_list without the master's)."""
    def joined(step):
        return lambda ctx, m: join_step(ctx, m, step)

    plan = [("up", S.step_up), ("cluster-nic", S.step_cluster_nic), ("cluster-ip", S.step_cluster_ip),
            ("node-proxy", S.step_node_proxy), ("existing-apply", step_apply)]
    for m in info.linux_workers:
        # Right after the join: the sooner the annotation is there, the likelier flanneld reads it at its start.
        plan += [(f"join:{m.name}", lambda ctx, m=m: joined(S.step_join_linux)(ctx, m)),
                 (f"flannel:{m.name}", lambda ctx, m=m: flannel_address.settle(ctx, m, ctx.flannel, S.wait_for))]
    plan += [(f"join:{m.name}", lambda ctx, m=m: joined(S.step_join_windows)(ctx, m)) for m in info.windows_workers]
    plan += [("ready", S.step_ready)]
    return plan


def hostprocess_rows(docs: list[dict]) -> list[list[str]]:
    """The plan's rows for what prerequisites checks of the objects it would apply."""
    rows = [["objects k4w applies", "a GET of each (below)", f"absent, or k4w's (label {PART_OF[0]}: {PART_OF[1]}) and not being deleted"]]
    if any(d.get("kind") == "DaemonSet" for d in docs):
        rows.append(["HostProcess pods", "GET /version", f"API server {'.'.join(map(str, HOSTPROCESS_MIN))} or newer (KEP 1981 stable); "
                     "the DaemonSets' KUBERNETES_SERVICE_HOST/PORT from kube-public/cluster-info"])
        rows.append(["Windows net-conf.json", "the CNI row's net-conf.json", "Network and Backend equal to each rendered nodes/<node>/net-conf.json"])
    return rows


def flannel_rows(cluster: Cluster) -> list[list[str]]:
    """The plan's row for the owner's flanneld on k4w's Linux workers (k4w.cluster.flannel_address)."""
    if all(cluster.profile(n.box).is_windows for n in cluster.config.nodes):
        return []
    prefix = flannel_address.DEFAULT_PREFIX
    return [["Flannel's interface on k4w's Linux workers", "the flanneld args of the cluster's Flannel DaemonSet",
             "--iface/--iface-regex/--iface-can-reach: left to them; none (it would take the management NIC): k4w sets "
             f"{prefix}/node-public-ip to each Linux worker's cluster address (and restarts that node's Flannel pod if it "
             f"started first); either way {prefix}/public-ip must become the cluster address"]]


def vxlan_device(cluster: Cluster) -> str:
    """flanneld's vxlan link on a Linux worker, flannel.<VNI>: the VNI the facts check made sure of."""
    return f"flannel.{cluster.network.vxlan_vni}"


# ------------------------------------------------------------------ the plan

def show_plan(cluster: Cluster, out: Path, files: dict[str, str]) -> None:
    """`invoke plan` for cluster.existing: no master, the facts cluster-up checks first, what it applies."""
    cfg, net = cluster.config, cluster.network
    ui.say(f"\nCluster plan: join-only, to the existing cluster of {cfg.cluster.existing} (no master VM, no kubeadm init):",
           style="bold")
    backend = f"{net.backend}" + (f" VNI {net.vxlan_vni} port {net.vxlan_port}" if net.backend == "vxlan" else "")
    docs = windows_objects(out, cluster, files)
    ui.table("Facts cluster-up reads through the API and must match, before any VM starts",
             ["fact", "read from", "cluster.yml expects"],
             [["Kubernetes version", "GET /version", "a kubelet of each box at most 3 minors older, never newer: "
               + ", ".join(f"{b} {(p.data.get('kubernetes') or {}).get('version')}" for b, p in cluster.profiles.items())],
              ["pod CIDR", "kube-system/kubeadm-config networking.podSubnet, else nodes' spec.podCIDRs", net.pod_cidr],
              ["service CIDR", "kube-system/kubeadm-config networking.serviceSubnet, else Service default/kubernetes", net.service_cidr],
              ["cluster DNS IP", "Service kube-system/kube-dns, else kube-system/kubelet-config clusterDNS", net.dns_ip],
              ["cluster domain", "kube-system/kubeadm-config networking.dnsDomain", cfg.cluster.domain],
              ["CNI", "ConfigMap kube-flannel-cfg (kube-flannel, kube-system) net-conf.json", f"Flannel {backend}, Network {net.pod_cidr}"],
              ["join RBAC", "kubeadm's bootstrap-token bindings, the ClusterRoles bound below", "present"],
              ["kube-proxy / Flannel DaemonSets", "apps/v1 DaemonSets", f"nodeSelector {OS_LABEL}: linux (k4w never changes them)"],
              ["node names", "GET /api/v1/nodes", "none of " + ", ".join(n.name for n in cfg.nodes)
               + " taken by a Node this installation did not join (refused, naming it)"],
              ["the cluster's own Windows nodes", "GET /api/v1/nodes: kubernetes.io/os windows without "
               f"{node_marks.NODE_LABEL[0]}", f"warned, not refused: k4w's DaemonSets select {node_marks.NODE_LABEL[0]}="
               f"{node_marks.NODE_LABEL[1]} and stay off them"]]
             + hostprocess_rows(docs) + flannel_rows(cluster))
    applied = [describe(d) for d in docs] + ["Secret kube-system/bootstrap-token-<id> per node (bootstrap token, TTL 1 h, "
                                              "deleted as soon as its node is Ready)"]
    workers_linux = [n.name for n in cfg.nodes if not cluster.profile(n.box).is_windows]
    workers_win = [n.name for n in cfg.nodes if cluster.profile(n.box).is_windows]
    steps = [
        f"read the facts above through the API ({cfg.cluster.existing}); refuse a mismatch, naming both values",
        f"vagrant up {' '.join(n.name for n in cfg.nodes)}; cluster NICs on "
        + (f"libvirt network '{cfg.libvirt.cluster_network}'; " if cfg.host.provider == "libvirt" else f"'{cfg.hyperv.cluster_switch}'; ")
        + "static IPs: " + ", ".join(f"{n.name}={n.ip}" for n in cfg.nodes),
        "apply, create-if-absent, recorded in " + str(out / RECORD_FILE) + ": " + "; ".join(applied),
        f"join Linux workers: {', '.join(workers_linux) or 'none'}; Windows workers: {', '.join(workers_win) or 'none'} "
        "(CA hash from kube-public/cluster-info)"
        + ("; after each Linux join, its Flannel address as in the row above" if workers_linux else ""),
        f"wait for those nodes to be Ready (timeout {cfg.cluster.ready_timeout} s), deleting each one's token once it is; "
        "nothing else in the cluster changes",
        f"the nodes register labelled {node_marks.NODE_LABEL[0]}={node_marks.NODE_LABEL[1]} and "
        f"{node_marks.INSTALLATION_LABEL}=<this --out's id>; Windows nodes tainted "
        f"{node_marks.taint_flag(node_marks.WINDOWS_TAINT)} (pods that name no OS stay off them)",
        "cluster-reset: delete this installation's Nodes and token, and the recorded objects no other k4w installation "
        f"uses (annotation {INSTALLATIONS}, k4w nodes of others); nothing else",
    ]
    for i, text in enumerate(steps, 1):
        ui.say(f"{i}. {text}")
