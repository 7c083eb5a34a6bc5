"""The kubeadm configs a run hands kubeadm, against kubeadm's field tables at the pinned API
(kubeadm_rules): the init config, and each worker's join configuration as cluster-up builds it.
Apart from kubeadm_rules, which cluster-up's join_config uses itself, so that the two depend one way."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from k4w.derive import join_config
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
                                   join_config.SAMPLE_HASH, node.name, join_config.SAMPLE_INSTALLATION)
        except K4wError as exc:
            problems.append(f"join configuration of {node.name}: {exc}")
    return problems


def run(cluster: Cluster, out: Path) -> Result:
    res = Result("kubeadm config", "fields of kubeadm's types at the pinned API")
    path = out / "kubeadm" / "kubeadm-config.yaml"
    res.checked.append(rel(path))
    # A cluster k4w did not make has no init config of k4w's (cluster.existing): only the joins.
    res.problems = [] if cluster.config.joins_existing else kubeadm_rules.check(path, cluster.kube.kubeadm_api)
    res.problems += _join_config_problems(cluster)
    return res


def would_run(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    return [f"# in this process: every field of {out / 'kubeadm' / 'kubeadm-config.yaml'} against "
            f"{kubeadm_rules.table_path(cluster.kube.kubeadm_api)}",
            "# in this process: every worker's kubeadm join configuration (sample token) against its kubeadm API's field table"]
