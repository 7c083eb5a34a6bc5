"""The identities cluster spec, run for real against a stand-in kubectl that answers `auth can-i`
the way the API server of a healthy modern cluster does: it passes that cluster and fails exactly
the check a planted defect (the old system:nodes group binding) breaks."""

from __future__ import annotations

import json
import os
import sys
import textwrap

import pytest

from k4w.infra.sources import REPO_ROOT as ROOT

MODERN = ROOT / "examples" / "cluster-modern.yml"
WINDOWS_NODE = ("worker-win", "192.168.251.21")

# The rights the API server grants in a healthy cluster: (verb, resource, --as) -> allowed.
# The modern example's Windows node runs them as HostProcess DaemonSets, whose ServiceAccounts live
# in their own namespace (k4w.derive.identities.HOSTPROCESS_NAMESPACE).
HEALTHY = {
    "list nodes system:serviceaccount:k4w-windows-node:k4w-windows-flanneld": True,
    "list services system:serviceaccount:k4w-windows-node:k4w-windows-kube-proxy": True,
}
# What binding system:node-proxier to the system:nodes group adds for every node.
GROUP_BINDING = {"list nodes system:node:worker-win": True, "list endpoints system:node:worker-win": True}

FAKE_KUBECTL = textwrap.dedent(f"""\
    #!{sys.executable}
    import json, os, sys
    state = json.load(open(os.environ["FAKE_KUBECTL_STATE"]))
    args = [a for a in sys.argv[1:] if not a.startswith("--kubeconfig=")]
    if args[:2] == ["auth", "can-i"]:
        who = next(a.split("=", 1)[1] for a in args if a.startswith("--as="))
        allowed = state["rights"].get(" ".join(args[2:4]) + " " + who, False)
        print("yes" if allowed else "no")
        sys.exit(0 if allowed else 1)
    if args[:2] == ["get", "nodes"]:
        print(json.dumps({{"items": state["nodes"]}}))
        sys.exit(0)
    print("fake kubectl: unexpected " + " ".join(args), file=sys.stderr)
    sys.exit(2)
    """)


@pytest.fixture
def run_identities_spec(run_spec, tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    kubectl = bin_dir / "kubectl"
    kubectl.write_text(FAKE_KUBECTL)
    kubectl.chmod(0o755)
    out = tmp_path / "build"
    out.mkdir()
    (out / "kubeconfig").write_text("apiVersion: v1\nkind: Config\n")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    def run(rights: dict, flannel_ip: str | None = WINDOWS_NODE[1]):
        node = {"metadata": {"name": WINDOWS_NODE[0], "annotations": {"flannel.alpha.coreos.com/public-ip": flannel_ip} if flannel_ip else {}}}
        state = tmp_path / "kubectl-state.json"
        state.write_text(json.dumps({"rights": rights, "nodes": [node]}))
        monkeypatch.setenv("FAKE_KUBECTL_STATE", str(state))
        return run_spec(["test_cluster_identities.py"], f"--k4w-out={out}", f"--k4w-config={MODERN}")

    return run


def _failed(run) -> list[str]:
    return sorted({t.split("::", 1)[1].split("[", 1)[0] for t in run.result["failed_tests"]})


def test_a_healthy_modern_cluster_passes(run_identities_spec):
    run = run_identities_spec(HEALTHY)
    assert run.proc.returncode == 0, run.output
    assert run.result["passed"] == 4 and run.result["failed"] == run.result["skipped"] == 0


def test_the_system_nodes_group_binding_fails_the_node_check_only(run_identities_spec):
    run = run_identities_spec({**HEALTHY, **GROUP_BINDING})
    assert run.proc.returncode == 1
    assert _failed(run) == ["test_a_node_credential_cannot_list_every_node"]
    assert "may list every node" in run.output


def test_a_windows_component_without_its_binding_fails(run_identities_spec):
    rights = {k: v for k, v in HEALTHY.items() if "flanneld" not in k}
    run = run_identities_spec(rights, flannel_ip=None)
    assert run.proc.returncode == 1
    assert _failed(run) == ["test_flanneld_on_windows_registered_each_windows_node", "test_windows_component_has_its_linux_twins_rights_and_no_more"]
    assert "k4w-windows-flanneld may not list nodes" in run.output
