"""k4w's node marks hold everywhere they must (k4w/derive/node_marks.py says what they are and why):

- every worker's join configuration registers k4w's node label (kubelet --node-labels), and a Windows
  worker's also the Windows taint; a seed-era Windows kubelet, which reads no kubeadm-flags.env, carries
  both as flags in its kubelet.args;
- every pod template of the rendered manifests that selects Windows nodes tolerates the Windows taint
  (else it would never be scheduled on k4w's Windows nodes);
- every k4w DaemonSet that selects Windows nodes selects k4w's node label too (else it lands on the Windows
  nodes of a cluster's owner, where its HostProcess pods run k4w's scripts against a node k4w did not set up).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from k4w.derive import node_marks
from .args_file import read_args
from .hostprocess_rules import pod_spec

PART_OF = ("app.kubernetes.io/part-of", "k4w")


def _selects_windows(spec: dict) -> bool:
    return any(k.endswith("kubernetes.io/os") and v == "windows" for k, v in (spec.get("nodeSelector") or {}).items())


def check_pod_specs(where: str, docs: list[dict]) -> list[str]:
    """The pod-template rules over one manifest's documents."""
    problems = []
    for doc in docs:
        spec = pod_spec(doc)
        if spec is None or not _selects_windows(spec):
            continue
        name = f"{where}: {doc.get('kind')} {(doc.get('metadata') or {}).get('name')}"
        if not node_marks.tolerates(spec):
            problems.append(f"{name} selects Windows nodes but does not tolerate k4w's Windows taint "
                            f"{node_marks.taint_flag(node_marks.WINDOWS_TAINT)} (k4w/derive/node_marks.py WINDOWS_TOLERATION)")
        labels = (doc.get("metadata") or {}).get("labels") or {}
        key, value = node_marks.NODE_LABEL
        if doc.get("kind") == "DaemonSet" and labels.get(PART_OF[0]) == PART_OF[1] and \
                str((spec.get("nodeSelector") or {}).get(key)) != value:
            problems.append(f"{name} selects every Windows node: its nodeSelector must also hold {key}: \"{value}\", "
                            "so that it stays off Windows nodes k4w did not join")
    return problems


def check_join_configs(cluster) -> list[str]:
    """Each worker's join configuration as cluster-up builds it (a sample token and installation)."""
    from k4w.derive import join_config

    problems = []
    key, value = node_marks.NODE_LABEL
    for node in cluster.config.nodes:
        if node.role == "master":
            continue
        doc = join_config.worker_document(node.box, join_config.validation_api_server(cluster), join_config.SAMPLE_TOKEN,
                                          join_config.SAMPLE_HASH, node.name, join_config.SAMPLE_INSTALLATION,
                                   timeouts=cluster.join_timeouts)
        registration = doc.get("nodeRegistration") or {}
        extra = registration.get("kubeletExtraArgs") or {}
        pairs = extra.items() if isinstance(extra, dict) else ((a.get("name"), a.get("value")) for a in extra)
        labels = dict(item.split("=", 1) for name, v in pairs if name == "node-labels" for item in str(v).split(",") if "=" in item)
        where = f"join configuration of {node.name} ({node.box})"
        if labels.get(key) != value or labels.get(node_marks.INSTALLATION_LABEL) != join_config.SAMPLE_INSTALLATION:
            problems.append(f"{where}: the kubelet's --node-labels (kubeletExtraArgs) must hold {key}={value} and "
                            f"{node_marks.INSTALLATION_LABEL}=<installation>, has {labels or 'none'}")
        windows = cluster.profile(node.box).is_windows
        if windows and node_marks.WINDOWS_TAINT not in (registration.get("taints") or []):
            problems.append(f"{where}: a Windows worker must register with the taint "
                            f"{node_marks.taint_flag(node_marks.WINDOWS_TAINT)} (nodeRegistration.taints)")
    return problems


def check_seed_kubelet_args(node_dir: Path) -> list[str]:
    """A seed-era Windows kubelet (no kubeadm-flags.env) carries the marks in its own flags."""
    args = read_args(node_dir / "kubelet.args")
    if args.get("--config"):   # the containerd era: kubeadm-flags.env brings them (check_join_configs)
        return []
    problems = []
    key, value = node_marks.NODE_LABEL
    labels = dict(item.split("=", 1) for item in args.get("--node-labels", "").split(",") if "=" in item)
    if labels.get(key) != value:
        problems.append(f"nodes/{node_dir.name}/kubelet.args: --node-labels must hold {key}={value}, is {args.get('--node-labels')!r}")
    taint = node_marks.taint_flag(node_marks.WINDOWS_TAINT)
    if taint not in args.get("--register-with-taints", "").split(","):
        problems.append(f"nodes/{node_dir.name}/kubelet.args: --register-with-taints must hold {taint}, "
                        f"is {args.get('--register-with-taints')!r}")
    return problems


def check(out: Path, cluster=None) -> list[str]:
    out = Path(out)
    problems: list[str] = []
    for path in sorted((out / "manifests").rglob("*.yaml")):
        try:
            docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if isinstance(d, dict)]
        except (OSError, yaml.YAMLError):
            continue   # manifest_rules reports an unreadable manifest
        problems += check_pod_specs(path.relative_to(out).as_posix(), docs)
    for node_dir in sorted((out / "nodes").glob("*")):
        if (node_dir / "kubelet.args").is_file():
            problems += check_seed_kubelet_args(node_dir)
    if cluster is not None:
        problems += check_join_configs(cluster)
    return problems
