"""Record the API answers the cluster.existing unit tests replay (tests/fixtures/existing-cluster/answers.json)
from a real control plane: the pinned kube-apiserver (tools/lock.yml, 1.37.2), set up by the pinned kubeadm's init phases, with
k4w's rendered Flannel v0.28.10 objects and one Node carrying spec.podCIDRs (tests/cluster/real_control_plane.py).

    .venv/bin/python -m tests.cluster.record_api_answers

Only GETs k4w.cluster.facts and k4w.cluster.existing make are recorded; the cluster-info CA and the
other PEM data are kept, since they are a throwaway cluster's public certificates (no key is recorded).
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from pathlib import Path

import yaml

from k4w import render
from k4w.cluster import bootstrap_token, existing, facts
from k4w.derive.cluster import Cluster
from k4w.model.config import parse
from tests.cluster import real_control_plane as cp
from tests.cluster.test_existing_real_api import COLLECTIONS
from tests.helpers import ROOT

ANSWERS = ROOT / "tests" / "fixtures" / "existing-cluster" / "answers.json"
PATHS = [
    "/version", facts.KUBEADM_CONFIG, facts.KUBELET_CONFIG, facts.KUBE_DNS, facts.KUBERNETES_SERVICE, "/api/v1/nodes",
    "/api/v1/namespaces/kube-flannel/configmaps/kube-flannel-cfg", "/apis/apps/v1/daemonsets", bootstrap_token.CLUSTER_INFO,
    "/apis/rbac.authorization.k8s.io/v1/clusterroles/flannel", "/apis/rbac.authorization.k8s.io/v1/clusterroles/system:node-proxier",
    *(path for _, path in existing.KUBEADM_JOIN_RBAC),
]


def main() -> None:
    with tempfile.TemporaryDirectory() as folder, contextlib.ExitStack() as stack:
        plane = cp.start(Path(folder), stack)
        api = plane.client()
        modern = Cluster.resolve(parse((ROOT / "examples" / "cluster-modern.yml").read_text()))
        for doc in yaml.safe_load_all(render.render_files(modern, Path(folder) / "out")["manifests/kube-flannel.yaml"]):
            if isinstance(doc, dict):
                api.create(COLLECTIONS[doc["kind"]].format(ns=doc["metadata"].get("namespace", "")), doc)
        api.create("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "cp", "labels": {"kubernetes.io/os": "linux"}},
                                     "spec": {"podCIDR": "10.244.0.0/24", "podCIDRs": ["10.244.0.0/24"]}})
        answers = {path: api.get(path) for path in PATHS}
    ANSWERS.write_text(json.dumps({"recorded_from": f"kube-apiserver {cp.VERSION}, kubeadm {cp.VERSION} init phases "
                                   "(tests/cluster/record_api_answers.py)", "answers": answers}, indent=1, sort_keys=True) + "\n")
    print(f"wrote {ANSWERS} ({len(answers)} answers)")


if __name__ == "__main__":
    main()
