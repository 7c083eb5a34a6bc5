"""The cluster spec's check of k4w's node marks (k4w/derive/node_marks.py), run for real against a stand-in
kubectl that answers `get nodes` as an API server would: every worker carries k4w.io/node, a Windows
worker also the Windows taint; a worker missing either fails, naming it; the master is not checked."""

from __future__ import annotations

import json
import os
import sys
import textwrap

import pytest

from k4w.infra.sources import REPO_ROOT as ROOT

MODERN = ROOT / "examples" / "cluster-modern.yml"
CHECK = "-k", "worker_carries_k4ws_marks"

FAKE_KUBECTL = textwrap.dedent(f"""\
    #!{sys.executable}
    import json, os, sys
    state = json.load(open(os.environ["FAKE_KUBECTL_STATE"]))
    args = [a for a in sys.argv[1:] if not a.startswith("--kubeconfig=")]
    if args[:2] == ["get", "nodes"]:
        print(json.dumps({{"items": state["nodes"]}}))
        sys.exit(0)
    print("fake kubectl: unexpected " + " ".join(args), file=sys.stderr)
    sys.exit(2)
    """)
TAINT = {"key": "os", "value": "windows", "effect": "NoSchedule"}


def node(name: str, os_name: str, labels: dict | None = None, taints: list | None = None) -> dict:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/os": os_name, **(labels or {})}},
            "spec": {"taints": taints or []}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}


MARKED = {"k4w.io/node": "true", "k4w.io/installation": "a1b2c3d4e5f6"}


@pytest.fixture
def run_marks_spec(run_spec, tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "kubectl").write_text(FAKE_KUBECTL)
    (bin_dir / "kubectl").chmod(0o755)
    out = tmp_path / "build"
    out.mkdir()
    (out / "kubeconfig").write_text("apiVersion: v1\nkind: Config\n")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    def run(nodes: list[dict]):
        state = tmp_path / "kubectl-state.json"
        state.write_text(json.dumps({"nodes": nodes}))
        monkeypatch.setenv("FAKE_KUBECTL_STATE", str(state))
        return run_spec(["test_cluster_nodes.py"], f"--k4w-out={out}", f"--k4w-config={MODERN}", *CHECK)

    return run


def test_marked_workers_pass_and_the_master_is_not_checked(run_marks_spec):
    run = run_marks_spec([node("master", "linux"), node("worker-linux", "linux", MARKED),
                          node("worker-win", "windows", MARKED, [TAINT])])
    assert run.proc.returncode == 0, run.output
    assert run.result["passed"] == 2 and run.result["failed"] == 0


def test_a_windows_worker_without_the_taint_fails_naming_it(run_marks_spec):
    run = run_marks_spec([node("master", "linux"), node("worker-linux", "linux", MARKED), node("worker-win", "windows", MARKED)])
    assert run.proc.returncode == 1
    assert "node worker-win: no taint os=windows:NoSchedule (has [])" in run.output


def test_a_worker_without_the_label_fails_naming_it(run_marks_spec):
    run = run_marks_spec([node("master", "linux"), node("worker-linux", "linux"), node("worker-win", "windows", MARKED, [TAINT])])
    assert run.proc.returncode == 1
    assert "node worker-linux: no label k4w.io/node=true" in run.output
