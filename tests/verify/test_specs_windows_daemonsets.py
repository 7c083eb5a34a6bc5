"""The cluster spec's check of the containerd era's Windows node DaemonSets, run for real against a
stand-in kubectl that answers as the API server of a cluster whose Windows node runs (or fails to
run) its flanneld and kube-proxy pods: it passes the healthy node, fails a crash-looping or missing
pod naming it, and on the seed era is deselected with its reason, never passed."""

from __future__ import annotations

import json
import os
import sys
import textwrap

import pytest

from k4w.infra.sources import REPO_ROOT as ROOT

MODERN = ROOT / "examples" / "cluster-modern.yml"
SEED = ROOT / "cluster.yml"
CHECK = "-k", "windows_node_runs_its_flanneld_and_kube_proxy_pods"

FAKE_KUBECTL = textwrap.dedent(f"""\
    #!{sys.executable}
    import json, os, sys
    state = json.load(open(os.environ["FAKE_KUBECTL_STATE"]))
    args = [a for a in sys.argv[1:] if not a.startswith("--kubeconfig=")]
    if args[:4] == ["get", "pods", "-n", "k4w-windows-node"] and args[4] == "--field-selector":
        node = args[5].split("=", 1)[1]
        print(json.dumps({{"items": [p for p in state["pods"] if p["spec"]["nodeName"] == node]}}))
        sys.exit(0)
    print("fake kubectl: unexpected " + " ".join(args), file=sys.stderr)
    sys.exit(2)
    """)


def pod(daemonset: str, node: str = "worker-win", ready: bool = True) -> dict:
    container = {"name": "c", "state": {"running": {}} if ready else {"waiting": {"reason": "CrashLoopBackOff"}}}
    return {"metadata": {"name": f"{daemonset}-abcde", "labels": {"app.kubernetes.io/name": daemonset}},
            "spec": {"nodeName": node},
            "status": {"phase": "Running", "containerStatuses": [container],
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


HEALTHY = [pod("k4w-flannel-windows"), pod("k4w-kube-proxy-windows")]


@pytest.fixture
def run_daemonsets_spec(run_spec, tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "kubectl").write_text(FAKE_KUBECTL)
    (bin_dir / "kubectl").chmod(0o755)
    out = tmp_path / "build"
    out.mkdir()
    (out / "kubeconfig").write_text("apiVersion: v1\nkind: Config\n")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    def run(pods: list[dict], config=MODERN):
        state = tmp_path / "kubectl-state.json"
        state.write_text(json.dumps({"pods": pods}))
        monkeypatch.setenv("FAKE_KUBECTL_STATE", str(state))
        return run_spec(["test_cluster_nodes.py"], f"--k4w-out={out}", f"--k4w-config={config}", *CHECK)

    return run


def test_a_windows_node_running_both_pods_passes(run_daemonsets_spec):
    run = run_daemonsets_spec(HEALTHY)
    assert run.proc.returncode == 0, run.output
    assert run.result["passed"] == 1 and run.result["failed"] == 0


def test_a_crash_looping_kube_proxy_pod_fails_naming_it(run_daemonsets_spec):
    run = run_daemonsets_spec([pod("k4w-flannel-windows"), pod("k4w-kube-proxy-windows", ready=False)])
    assert run.proc.returncode == 1
    assert "k4w-kube-proxy-windows-abcde: Running; c waiting CrashLoopBackOff" in run.output


def test_a_flannel_pod_on_another_node_only_fails_this_node(run_daemonsets_spec):
    run = run_daemonsets_spec([pod("k4w-flannel-windows", node="worker-other"), pod("k4w-kube-proxy-windows")])
    assert run.proc.returncode == 1
    assert "no pod of DaemonSet k4w-windows-node/k4w-flannel-windows on worker-win" in run.output


def test_the_seed_era_deselects_the_check_with_its_reason(run_daemonsets_spec):
    run = run_daemonsets_spec([], config=SEED)
    assert run.result["passed"] == 0 and run.result["failed"] == 0
    assert "runs flanneld and kube-proxy as HostProcess DaemonSets (the seed era runs them as services)" in run.output
