"""The identities of the Windows node components flanneld and kube-proxy.

On Linux, flanneld and kube-proxy run as DaemonSet pods with ServiceAccounts of their own. On a
Windows node each also gets a ServiceAccount of its own, bound to the same ClusterRole as its Linux
twin; how the component gets that ServiceAccount's token depends on the era:

- Containerd era (1.37, the windows-2022 and windows-2025 boxes, whose profiles have a `hostprocess:`
  block): they run as HostProcess DaemonSet pods (HOSTPROCESS_DAEMONSETS, in their own namespace,
  templates/manifests/windows-containerd/). The kubelet projects the ServiceAccount token into the
  pod and rotates it: no token Secret and no kubeconfig on the node.
- Seed era (Docker, 1.11, the windows-1803 box): they run as NSSM services (WINDOWS_COMPONENTS),
  each with a `kubernetes.io/service-account-token` Secret the cluster's token controller fills
  (templates/manifests/windows-node-rbac.yaml.j2) and a kubeconfig made from it that `cluster-up`
  writes to the node (k4w.cluster.steps). On 1.11 every ServiceAccount also gets such a Secret
  auto-created; k4w names its own so cluster-up can read it. Why not a TokenRequest with a bounded
  expiry: nothing on the node could renew it (an NSSM service reads a static kubeconfig, and the
  node's own credentials may not request tokens for another ServiceAccount), so the node would lose
  its pod network when the token expired. The Secret's token does not expire; it is revoked by
  deleting the Secret, and rotated by deleting it and running `invoke cluster-up` again (the
  manifests step recreates it, the Windows join step writes the new one). A 1.11 kubelet may join
  API servers up to 1.13 only (the version-skew policy, as k4w.cluster.facts applies it), so the
  legacy-token cleaner of much later releases is no concern of these Secrets.

One table per era, read by the manifest templates, the seed era's node args templates (--kubeconfig)
and cluster-up, so they cannot disagree. service_identities_needed decides whether the seed era's
token Secrets are rendered at all; cluster-up applies them only for a seed-era Windows node.
"""

from __future__ import annotations

from dataclasses import dataclass

NAMESPACE = "kube-system"
KUBECONFIG_DIR = "C:\\etc\\kubernetes"   # SYSTEM + Administrators only (guest/windows/node/protect-node-folders.ps1)


@dataclass(frozen=True)
class Identity:
    component: str       # flanneld or kube-proxy (on the seed era, also its NSSM service's name)
    service_account: str
    cluster_role: str    # the ClusterRole its Linux twin is bound to
    linux_source: str    # where that binding is, upstream
    namespace: str = NAMESPACE

    @property
    def secret(self) -> str:
        return f"{self.service_account}-token"

    @property
    def kubeconfig(self) -> str:
        return f"{KUBECONFIG_DIR}\\{self.component}.conf"


WINDOWS_COMPONENTS = (
    # The rendered Flannel manifest's own ClusterRole (templates/manifests/flannel/*.yaml.j2,
    # from Documentation/kube-flannel.yml of each Flannel release), bound there to its
    # ServiceAccount "flannel".
    Identity("flanneld", "k4w-windows-flanneld", "flannel", "flannel-io/flannel Documentation/kube-flannel.yml"),
    # kubeadm binds the built-in system:node-proxier to the kube-proxy ServiceAccount
    # (ClusterRoleBinding kubeadm:node-proxier, cmd/kubeadm/app/phases/addons/proxy/proxy.go).
    Identity("kube-proxy", "k4w-windows-kube-proxy", "system:node-proxier", "kubernetes/kubernetes cmd/kubeadm/app/phases/addons/proxy/proxy.go"),
)


def by_component(component: str) -> Identity:
    return next(i for i in WINDOWS_COMPONENTS if i.component == component)


# ------------------------------------------------------------------ containerd era: HostProcess pods

# The namespace of the Windows node DaemonSets (and nothing else). HostProcess pods are host-level
# (SYSTEM on the node, its whole file system and network), which only the Pod Security "privileged"
# level admits (Kubernetes Pod Security Standards, "HostProcess" under Baseline). The namespace sets
# that level explicitly, so no other namespace needs it and cluster defaults cannot change it.
HOSTPROCESS_NAMESPACE = "k4w-windows-node"


@dataclass(frozen=True)
class HostProcessDaemonSet:
    """One Windows node component as a HostProcess DaemonSet: its identity, its DaemonSet and the
    start script (guest/windows/hostprocess/) its container runs from the scripts ConfigMap."""

    identity: Identity
    daemonset: str
    script: str
    args_key: str   # the ConfigMap key holding the binary's flags, one per line (flag_rules reads it)
    binary: str     # the program in C:\k the script starts (installed and checksummed by the bake)


HOSTPROCESS_DAEMONSETS = (
    HostProcessDaemonSet(
        Identity("flanneld", "k4w-windows-flanneld", "flannel", "flannel-io/flannel Documentation/kube-flannel.yml",
                 namespace=HOSTPROCESS_NAMESPACE),
        daemonset="k4w-flannel-windows", script="start-flanneld.ps1", args_key="flanneld.args", binary="flanneld.exe"),
    HostProcessDaemonSet(
        Identity("kube-proxy", "k4w-windows-kube-proxy", "system:node-proxier",
                 "kubernetes/kubernetes cmd/kubeadm/app/phases/addons/proxy/proxy.go", namespace=HOSTPROCESS_NAMESPACE),
        daemonset="k4w-kube-proxy-windows", script="start-kube-proxy.ps1", args_key="kube-proxy.args", binary="kube-proxy.exe"),
)
# Dot-sourced by both start scripts; travels in the same ConfigMap.
HOSTPROCESS_LIBRARY = "hostprocess-lib.ps1"
HOSTPROCESS_CONFIGMAP = "k4w-windows-node-scripts"


def hostprocess_by_component(component: str) -> HostProcessDaemonSet:
    return next(d for d in HOSTPROCESS_DAEMONSETS if d.identity.component == component)


def runs_hostprocess(profile) -> bool:
    """Whether a box's flanneld and kube-proxy are HostProcess DaemonSets (its profile has a
    `hostprocess:` block, the containerd era) rather than services with token-Secret kubeconfigs."""
    return bool(profile.data.get("hostprocess"))


def windows_identity(component: str, hostprocess: bool) -> Identity:
    """The identity a Windows node's flanneld or kube-proxy uses: its DaemonSet's ServiceAccount on
    the containerd era, its service's on the seed era."""
    return hostprocess_by_component(component).identity if hostprocess else by_component(component)


# The seed era's token-Secret identities (templates/manifests/windows-node-rbac.yaml.j2).
SERVICE_IDENTITIES_TEMPLATE = "windows-node-rbac.yaml.j2"
SERVICE_IDENTITIES_MANIFEST = "windows-node-rbac.yaml"


def service_identities_needed(profiles) -> bool:
    """Whether a cluster needs the seed era's token Secrets: unless it has Windows nodes and every one
    runs flanneld and kube-proxy as HostProcess DaemonSets (a cluster without Windows nodes keeps
    rendering them, as it always did, so they are validated either way)."""
    windows = [p for p in profiles if p.is_windows]
    return not windows or any(not runs_hostprocess(p) for p in windows)
