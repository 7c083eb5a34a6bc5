"""The marks k4w's nodes carry from their first registration, and the objects that select or tolerate them.

- NODE_LABEL (k4w.io/node=true) on every node k4w joins: k4w's Windows DaemonSets select it beside the OS
  label, so they never land on Windows nodes of the cluster's owner.
- INSTALLATION_LABEL (k4w.io/installation=<id>): which installation (one --out, k4w.cluster.state) joined
  it, so that one host's cluster-reset deletes its own Nodes only, never another installation's.
Both are set by the kubelet itself when it registers (--node-labels, from the kubeadm join configuration's
kubeletExtraArgs, k4w.derive.join_config), so no Node is ever unmarked. Their prefix k4w.io/ is outside
kubernetes.io and k8s.io: the kubelet refuses --node-labels there except its own (kubernetes/kubernetes@v1.37.2
cmd/kubelet/app/options/options.go ValidateKubeletFlags), and NodeRestriction forbids a node to set or change
those (plugin/pkg/admission/noderestriction/admission.go getForbiddenLabels); any other prefix a node may set.

- WINDOWS_TAINT (os=windows:NoSchedule), the taint the Kubernetes Windows user guide suggests for Windows
  nodes (kubernetes/website content/en/docs/concepts/windows/user-guide.md, "Taints and tolerations"): pods
  that name no OS (the owner's Linux workloads) stay off k4w's Windows nodes; k4w's own Windows pods tolerate it.
  Registered at join: nodeRegistration.taints, which kubeadm turns into the kubelet's --register-with-taints
  in kubeadm-flags.env for a worker join (cmd/kubeadm/app/cmd/phases/join/kubelet.go, registerTaintsUsingFlags
  when the node is no control plane; cmd/kubeadm/app/phases/kubelet/flags.go). NodeRestriction lets a node
  register with taints and forbids it only to change them later (admitNode, same file). The kubeadm, kubelet
  and NodeRestriction facts are read in k8s.io/kubernetes@v1.37.2 as the Go module proxy serves it; flags.go
  has no per-OS variant, so a Windows join writes the same flags.
"""

from __future__ import annotations

NODE_LABEL = ("k4w.io/node", "true")
INSTALLATION_LABEL = "k4w.io/installation"
WINDOWS_TAINT = {"key": "os", "value": "windows", "effect": "NoSchedule"}
WINDOWS_TOLERATION = {"key": "os", "operator": "Equal", "value": "windows", "effect": "NoSchedule"}


def node_labels(installation: str | None) -> dict[str, str]:
    """The labels a k4w node registers with."""
    return {NODE_LABEL[0]: NODE_LABEL[1], **({INSTALLATION_LABEL: installation} if installation else {})}


def kubelet_node_labels(labels: dict[str, str]) -> str:
    """The value of the kubelet's --node-labels: key=value pairs joined by commas."""
    return ",".join(f"{k}={v}" for k, v in labels.items())


def taint_flag(taint: dict) -> str:
    """key=value:effect, the form of the kubelet's --register-with-taints."""
    return f"{taint['key']}={taint['value']}:{taint['effect']}"


def tolerates(pod_spec: dict, taint: dict = WINDOWS_TAINT) -> bool:
    """Whether a pod spec's tolerations let it onto a node with this NoSchedule taint (the scheduler's
    rule: the same key, or an empty key with Exists; Equal needs the same value; an empty effect matches all)."""
    for t in pod_spec.get("tolerations") or []:
        if t.get("effect") not in (None, "", taint["effect"]):
            continue
        operator = t.get("operator") or "Equal"
        if operator == "Exists" and t.get("key") in (None, "", taint["key"]):
            return True
        if operator == "Equal" and t.get("key") == taint["key"] and t.get("value") == taint["value"]:
            return True
    return False
