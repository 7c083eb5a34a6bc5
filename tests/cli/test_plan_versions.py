"""`invoke plan` shows the versions of each box side by side (issue 14): one column per box in use,
one row per thing a box runs, every value read from the box profiles."""

from __future__ import annotations

import re

from tests.helpers import MODERN_ENV, invoke, modern_config, write_config


def _versions(stdout: str) -> dict[str, list[str]]:
    """The plan's box-version table as {row: [value per box]}, with the header row under ''."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Box versions"))
    table = {}
    for line in lines[start + 1:]:
        if not line.startswith("  "):
            break
        cells = re.split(r"\s{2,}", line.strip())
        if line.startswith("   "):  # the header row has an empty first cell
            table[""] = cells
        else:
            table[cells[0]] = cells[1:]
    return table


def test_plan_shows_the_seed_boxes_side_by_side(tmp_path):
    result = invoke("plan", "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    table = _versions(result.stdout)
    assert table[""] == ["ubuntu-1604", "windows-1803"]
    assert table["Kubernetes"] == ["1.11.10", "1.11.10"]
    assert table["container runtime"] == ["docker 17.03.2", "docker 17.09.0-ce"]
    assert table["Flannel"] == ["v0.11.0-amd64", "0.11.0"]
    assert table["CNI plugins"] == ["0.6.0", "0.8.7"]
    assert table["ISO"] == ["ubuntu-16.04.7-server-amd64.iso", "windows-server-1803.iso"]


def test_plan_shows_a_modern_master_beside_its_windows_worker(tmp_path):
    cfg = write_config(tmp_path / "cluster.yml", modern_config())
    result = invoke("plan", "--config", str(cfg), "--out", str(tmp_path / "out"), env=MODERN_ENV)
    assert result.returncode == 0, result.stdout + result.stderr
    table = _versions(result.stdout)
    assert table[""] == ["ubuntu-2404", "windows-2022"]
    assert table["Kubernetes"][0] == "1.37.2" and table["kubeadm API"][0] == "v1beta4"
    assert table["Flannel"][0] == "v0.28.10"


def test_plan_shows_the_2025_and_2604_boxes_of_the_modern_example(tmp_path):
    from tests.helpers import ROOT

    result = invoke("plan", "--config", str(ROOT / "examples" / "cluster-modern.yml"), "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stdout + result.stderr
    table = _versions(result.stdout)
    assert table[""] == ["ubuntu-2604", "windows-2025"]
    assert table["Kubernetes"] == ["1.37.2", "1.37.2"]
    assert table["ISO"] == ["ubuntu-26.04-live-server-amd64.iso", "26100.32230.260111-0550.lt_release_svc_refresh_SERVER_EVAL_x64FRE_en-us.iso"]
    # The cluster plan names what the containerd-era Windows node runs, not the seed era's Docker services.
    text = " ".join(result.stdout.split())
    assert "join Windows workers: worker-win (containerd -> kubelet; flanneld and kube-proxy as HostProcess DaemonSets)" in text
    assert "Windows node HostProcess DaemonSets; wait for master Ready" in text and "docker ->" not in text


def test_plan_shows_each_windows_box_patch_level_with_its_age(tmp_path):
    """build.UBR and the age of the update that is that UBR: the pinned LCU's (windows-2022) or, with none
    pinned, the ISO's (windows-2025, 26100.32230 = KB5073379 of 2026-01-13)."""
    import datetime as dt

    from tests.helpers import ROOT

    today = dt.date.today()
    result = invoke("plan", "--config", str(ROOT / "examples" / "cluster-modern.yml"), "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stdout + result.stderr
    age = (today - dt.date(2026, 1, 13)).days
    assert _versions(result.stdout)["patch level"] == ["-", f"26100.32230 (ISO, 2026-01-13, {age} days old)"]
    cfg = write_config(tmp_path / "cluster.yml", modern_config())
    result = invoke("plan", "--config", str(cfg), "--out", str(tmp_path / "out2"), env=MODERN_ENV)
    assert result.returncode == 0, result.stdout + result.stderr
    age = (today - dt.date(2026, 9, 8)).days
    assert _versions(result.stdout)["patch level"] == ["-", f"20348.5622 (KB5122882, 2026-09-08, {age} days old)"]
