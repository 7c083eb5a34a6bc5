"""Results: counted honestly (specrun), recorded into the build record's `test` slot (records),
summarised (report)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from k4w.infra.errors import K4wError
from k4w.verify import records, report, specrun


def _reports(n, **extra):
    return [SimpleNamespace(nodeid=f"t{i}", **extra) for i in range(n)]


def _result(**counts) -> dict:
    stats = {key: _reports(n) for key, n in counts.items()}
    res = specrun.result_from_stats(stats, [("t9", "kubernetes_binaries", "CI: dl.k8s.io unreachable")], 0 if not (
        counts.get("failed") or counts.get("error")) else 1)
    res["junit"] = "/tmp/junit.xml"
    return res


def test_result_counts_come_from_pytests_statistics():
    res = _result(passed=3, failed=1, error=2, xfailed=1)
    assert (res["passed"], res["failed"], res["errors"], res["skipped"], res["xfailed"]) == (3, 1, 2, 0, 1)
    assert res["failed_tests"] == ["t0", "t1"]
    assert res["deselected"] == [{"test": "t9", "check": "kubernetes_binaries", "reason": "CI: dl.k8s.io unreachable"}]


@pytest.mark.parametrize("counts, outcome", [
    ({"passed": 5}, "passed"),
    ({"passed": 4, "xfailed": 1}, "passed"),
    ({"passed": 5, "failed": 1}, "failed"),
    ({"passed": 5, "error": 1}, "failed"),
    ({"passed": 5, "skipped": 1}, "failed"),  # a skip is a check that did not run
    ({}, "failed"),  # nothing ran is not a pass
])
def test_outcome(counts, outcome):
    assert specrun.outcome(_result(**counts)) == outcome


def test_test_entry_is_written_into_an_existing_build_record(tmp_path):
    path = tmp_path / "boxes" / "ubuntu-1604.record.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"box": "ubuntu-1604", "version": "20261121.194500", "test": None}))
    entry = records.test_entry(_result(passed=30, failed=2), "throwaway VM", "t0", "t1", "box")
    records.record_test(tmp_path, "ubuntu-1604", entry)
    data = json.loads(path.read_text())
    assert data["box"] == "ubuntu-1604" and data["version"] == "20261121.194500"
    assert data["test"]["result"] == "failed"
    assert (data["test"]["passed"], data["test"]["failed"]) == (30, 2)
    assert data["test"]["started"] == "t0" and data["test"]["finished"] == "t1"


def test_without_a_build_record_only_the_test_entry_is_written(tmp_path):
    entry = records.test_entry(_result(passed=1), "ssh vagrant@127.0.0.1:2222", "t0", "t1", "box")
    path = records.record_test(tmp_path, "ubuntu-1604", entry)
    assert list(json.loads(path.read_text())) == ["test"]


def test_a_corrupt_build_record_is_not_overwritten(tmp_path):
    path = tmp_path / "boxes" / "ubuntu-1604.record.json"
    path.parent.mkdir()
    path.write_text("{not json")
    with pytest.raises(K4wError, match="not overwriting"):
        records.record_test(tmp_path, "ubuntu-1604", {"result": "passed"})
    assert path.read_text() == "{not json"


def test_summary_table_lists_failures_expected_failures_and_deselections():
    ok = _result(passed=9)
    bad = _result(passed=20, failed=1, xfailed=2)
    bad["expected_failures"] = [{"test": "test_path[win-pod->external:nat]", "reason": "no outbound NAT from Windows pods"}]
    text = report.markdown({"nodes ubuntu-1604": ok, "cluster": bad}, "k4w cluster-test", "now")
    assert "| nodes ubuntu-1604 | passed | 9 | 0 | 0 | 0 | 1 | junit.xml |" in text
    assert "| cluster | failed | 20 | 1 | 0 | 2 | 1 | junit.xml |" in text
    assert "- cluster: `t0`" in text
    assert "- cluster: `test_path[win-pod->external:nat]`: no outbound NAT from Windows pods" in text
    assert "- cluster: kubernetes_binaries (1): CI: dl.k8s.io unreachable" in text
