"""The kubeadm configs a run hands kubeadm, against kubeadm's field tables at the pinned API
(kubeadm_rules): the init config, and each worker's join configuration as cluster-up builds it.
Apart from kubeadm_rules, which cluster-up's join_config uses itself, so that the two depend one way."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

import yaml

from k4w.derive import control_plane, join_config
from k4w.derive.cluster import Cluster
from k4w.infra.errors import K4wError
from k4w.model import kubeadm_fields as kubeadm_rules
from .result import Result, rel


def _join_config_problems(cluster: Cluster) -> list[str]:
    """Each worker's join configuration, as cluster-up builds it (with a sample token: the real one
    exists only during cluster-up, which checks it again), against its own kubeadm API's fields."""
    problems = []
    for node in cluster.config.nodes:
        if node.role == "master":
            continue
        try:
            join_config.for_worker(node.box, join_config.validation_api_server(cluster), join_config.SAMPLE_TOKEN,
                                   join_config.SAMPLE_HASH, node.name, join_config.SAMPLE_INSTALLATION,
                                   timeouts=cluster.join_timeouts)
        except K4wError as exc:
            problems.append(f"join configuration of {node.name}: {exc}")
    return problems


def _documents(path: Path) -> dict[str, dict]:
    """The rendered config's documents by kind ({} when it is missing or not YAML: kubeadm_rules says so)."""
    try:
        return {d.get("kind"): d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if isinstance(d, dict)}
    except (OSError, yaml.YAMLError):
        return {}


def patch_problems(cluster: Cluster, out: Path) -> list[str]:
    """kubeadm's patches of its static Pods (k4w.derive.control_plane) as kubeadm will read them:
    - every rendered file under OUT/kubeadm/patches/ is named as kubeadm reads one: kubeadm IGNORES a file
      whose target or extension it does not know (a log line, no error), so its setting would be lost;
    - InitConfiguration.patches.directory names the folder cluster-up uploads them to, exactly when the
      master's CPU is emulated (any other folder is not on the master, and `kubeadm init` fails there);
    - an emulated CPU's config carries every scaled setting: a patch for each liveness-tolerant static Pod
      and the leader-election extraArgs of each leader-electing component."""
    folder = out / control_plane.PATCHES_OUT_DIR
    files = sorted(p for p in folder.iterdir() if p.is_file()) if folder.is_dir() else []
    problems = [f"{rel(f)}: kubeadm ignores a patch file of this name, so its setting would be lost: name it "
                f"target[suffix][+patchtype].extension, target one of {', '.join(control_plane.PATCH_TARGETS)}, patchtype "
                f"one of {', '.join(control_plane.PATCH_TYPES)}, extension json or yaml (k8s.io/kubernetes@v1.37.2 "
                "cmd/kubeadm/app/util/patches/patches.go)" for f in files if not control_plane.PATCH_NAME.match(f.name)]
    config = out / "kubeadm" / "kubeadm-config.yaml"
    documents = _documents(config)
    scaling = cluster.control_plane
    wanted = scaling.patches_dir if scaling else None
    named = ((documents.get("InitConfiguration") or {}).get("patches") or {}).get("directory")
    if named != wanted:
        problems.append(f"{rel(config)}: InitConfiguration.patches.directory is {named!r}, expected {wanted!r} "
                        + ("(the folder cluster-up uploads OUT/kubeadm/patches/ to, for libvirt.accelerator tcg)" if scaling
                           else "(only an emulated CPU's master gets patches; no other folder is on the master)"))
    if files and not scaling:
        problems.append(f"{rel(folder)}: patches rendered for a master whose CPU is not emulated ({len(files)} files)")
    if not scaling:
        return problems
    targets = {m["target"] for m in map(control_plane.PATCH_NAME.match, (f.name for f in files)) if m}
    problems += [f"{rel(folder)}: no patch for {target}: its livenessProbe keeps kubeadm's failureThreshold "
                 f"{control_plane.KUBEADM_LIVENESS_FAILURE_THRESHOLD} on an emulated CPU"
                 for target in scaling.liveness_tolerant if target not in targets]
    cluster_config = documents.get("ClusterConfiguration") or {}
    for key in scaling.config_keys:
        given = [(a.get("name"), a.get("value")) for a in (cluster_config.get(key) or {}).get("extraArgs") or []
                 if isinstance(a, dict)]
        problems += [f"{rel(config)}: ClusterConfiguration.{key}.extraArgs lacks {name}={value} (an emulated CPU's "
                     "leader-election lease, k4w/derive/control_plane.py)"
                     for name, value in scaling.leader_election if (name, value) not in given]
    return problems


def run(cluster: Cluster, out: Path) -> Result:
    res = Result("kubeadm config", "fields of kubeadm's types at the pinned API")
    path = out / "kubeadm" / "kubeadm-config.yaml"
    res.checked.append(rel(path))
    # A cluster k4w did not make has no init config of k4w's (cluster.existing): only the joins.
    res.problems = [] if cluster.config.joins_existing else kubeadm_rules.check(path, cluster.kube.kubeadm_api)
    res.problems += _join_config_problems(cluster)
    if not cluster.config.joins_existing:
        res.problems += patch_problems(cluster, out)
    return res


def would_run(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    return [f"# in this process: every field of {out / 'kubeadm' / 'kubeadm-config.yaml'} against "
            f"{kubeadm_rules.table_path(cluster.kube.kubeadm_api)}",
            "# in this process: every worker's kubeadm join configuration (sample token) against its kubeadm API's field table",
            f"# in this process: the names of {out / control_plane.PATCHES_OUT_DIR} as kubeadm reads them, and the patches "
            "folder and leader-election extraArgs an emulated CPU's kubeadm config must carry"]
