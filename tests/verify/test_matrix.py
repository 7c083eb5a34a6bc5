"""The connectivity matrix: rows as data, their ids, and which rows are expected to fail."""

from __future__ import annotations

import re

import pytest
import yaml

from k4w.verify import matrix
from k4w.verify.probes import PathUnreachable

DEFAULT = ("host-gw", {"windows-1803"})
ID = re.compile(r"^(win-pod|linux-pod|external|win-node)->[a-z-]+:(ip|dns|nodeport|nat|winrm-http|winrm-https)$")
WINRM_ROWS = {f"{source}->{target}:{way}" for source in ("linux-pod", "win-pod") for target in ("win-node", "win-node-mgmt")
              for way in ("winrm-http", "winrm-https")}


def _marks(param, name):
    return [m for m in param.marks if m.name == name]


def test_matrix_covers_the_seed_checklist_and_the_nodeport_limitation():
    ids = [row.id for row in matrix.MATRIX]
    assert len(ids) == 25 and len(set(ids)) == 25
    assert all(ID.match(i) for i in ids), ids
    for pair in ("win-pod->win-pod", "win-pod->linux-pod", "linux-pod->win-pod", "linux-pod->linux-pod",
                 "linux-pod->win-svc", "win-pod->linux-svc"):
        assert {f"{pair}:ip", f"{pair}:dns"} <= set(ids), pair
    assert {"external->win-node:nodeport", "external->linux-node:nodeport", "linux-pod->external:nat",
            "win-pod->external:nat", "win-node->same-win-node:nodeport"} <= set(ids)
    assert all(row.claim for row in matrix.MATRIX)


def test_winrm_is_a_closed_row_from_every_pod_to_both_addresses_of_a_windows_node():
    closed = {row.id: row for row in matrix.MATRIX if row.closed}
    assert set(closed) == WINRM_ROWS
    assert {matrix.WINRM_PORTS[row.way] for row in closed.values()} == {5985, 5986}
    # a closed row is asserted closed, never an expected failure that an open port could satisfy
    assert all(row.known_issue is None for row in closed.values())


def test_default_cluster_expects_exactly_the_two_documented_failures_strictly():
    params = matrix.pytest_params(*DEFAULT)
    assert [p.id for p in params] == [row.id for row in matrix.MATRIX]
    xfails = {p.id: _marks(p, "xfail")[0] for p in params if _marks(p, "xfail")}
    assert sorted(xfails) == ["win-node->same-win-node:nodeport", "win-pod->external:nat"]
    for mark in xfails.values():
        assert mark.kwargs["strict"] is True
        # Only "no answer" is the expected failure; a broken probe or setup still fails.
        assert mark.kwargs["raises"] is PathUnreachable
    assert "seed 000" in xfails["win-pod->external:nat"].kwargs["reason"]
    assert "REFERENCE.md" in xfails["win-node->same-win-node:nodeport"].kwargs["reason"]
    assert not any(_marks(p, "k4w_deselect") for p in params)


def test_outbound_nat_from_windows_pods_is_only_expected_to_fail_on_1803_host_gw():
    for backend, boxes in (("vxlan", {"windows-1803"}), ("host-gw", {"windows-2019"})):
        xfails = [p.id for p in matrix.pytest_params(backend, boxes) if _marks(p, "xfail")]
        assert xfails == ["win-node->same-win-node:nodeport"], (backend, boxes)


def test_outbound_from_a_windows_pod_runs_and_must_pass_on_the_modern_stack():
    # examples/cluster-modern.yml: vxlan with windows-2022, whose cluster NIC gets a default route
    # through the host NAT at cluster-up (guest/windows/cluster/cluster-ip.ps1 -Gateway).
    params = {p.id: p for p in matrix.pytest_params("vxlan", {"windows-2022"})}
    row = params["win-pod->external:nat"]
    assert not _marks(row, "xfail") and not _marks(row, "k4w_deselect")


def test_a_cluster_without_windows_deselects_every_windows_row_with_a_reason():
    params = matrix.pytest_params("host-gw", set())
    deselected = {p.id: _marks(p, "k4w_deselect")[0].args[0] for p in params if _marks(p, "k4w_deselect")}
    assert sorted(deselected) == sorted(r.id for r in matrix.MATRIX if "win" in r.id)
    assert set(deselected.values()) == {"cluster.yml has no Windows node"}
    assert "linux-pod->linux-pod:dns" not in deselected


def test_unknown_endpoint_is_refused():
    with pytest.raises(ValueError):
        matrix.Path("mac-pod", "linux-pod", "ip", "nonsense")


# ------------------------------------------------------------------ the real spec's parametrization


@pytest.fixture
def fake_out(tmp_path):
    out = tmp_path / "build"
    out.mkdir()
    (out / "kubeconfig").write_text("apiVersion: v1\nkind: Config\n")  # collection only checks it exists
    return out


def test_spec_collects_one_readable_test_per_row(run_spec, fake_out, cluster_yml):
    run = run_spec(["test_cluster_connectivity.py"], "--collect-only", "-q", f"--k4w-out={fake_out}", f"--k4w-config={cluster_yml}")
    assert run.proc.returncode == 0, run.output
    collected = re.findall(r"test_path\[(.+?)\]", run.proc.stdout)
    assert collected == [row.id for row in matrix.MATRIX]
    # Beside the matrix, the Nano Server volume check, once per Windows box of cluster.yml.
    assert re.findall(r"test_a_nano_server_pod_uses_its_token_configmap_and_emptydir\[(.+?)\]", run.proc.stdout) == ["windows-1803"]


def test_spec_on_a_linux_only_cluster_lists_the_windows_rows_as_deselected(run_spec, fake_out, tmp_path, cluster_yml):
    data = yaml.safe_load(cluster_yml.read_text())
    data["nodes"] = [n for n in data["nodes"] if not n["box"].startswith("windows")]
    linux_only = tmp_path / "linux-only.yml"
    linux_only.write_text(yaml.safe_dump(data))
    run = run_spec(["test_cluster_connectivity.py"], "--collect-only", "-q", f"--k4w-out={fake_out}", f"--k4w-config={linux_only}")
    assert run.proc.returncode == 0, run.output
    windows_rows = [r.id for r in matrix.MATRIX if "win" in r.id]
    # + 1: the Nano Server volume check, which needs a Windows node as the Windows rows do.
    total, deselected = len(matrix.MATRIX) + 1, len(windows_rows) + 1
    assert f"{total - deselected}/{total} tests collected ({deselected} deselected)" in run.output
    assert f"connectivity ({len(windows_rows)} tests): cluster.yml has no Windows node" in run.output
    assert "pod_volumes (1 test): cluster.yml has no Windows node" in run.output
