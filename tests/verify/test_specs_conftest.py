"""The live specs' plugin (k4w/verify/specs/conftest.py): no check is reported as passed, or
skipped, that did not run."""

from __future__ import annotations

import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import yaml

from k4w.infra.sources import REPO_ROOT as ROOT

UBUNTU = ["test_ubuntu_box.py"]
WINDOWS = ["test_windows_box.py"]


def _box_args(cluster_yml, box="ubuntu-1604"):
    return [f"--k4w-box={box}", f"--k4w-config={cluster_yml}"]


def _junit_counts(path) -> dict:
    suite = ET.parse(path).getroot().find("testsuite")
    return {k: int(suite.get(k)) for k in ("tests", "failures", "errors", "skipped")}


def test_box_spec_without_a_target_is_a_usage_error_not_a_local_check(run_spec, cluster_yml):
    run = run_spec(UBUNTU, *_box_args(cluster_yml))
    assert run.proc.returncode == 4, run.output  # pytest.ExitCode.USAGE_ERROR
    assert "--hosts is required" in run.output
    assert run.result["passed"] == 0 and run.result["exit_status"] == 4  # nothing ran


def test_cluster_spec_without_a_build_folder_is_a_usage_error(run_spec, cluster_yml):
    run = run_spec(["test_cluster_nodes.py"], f"--k4w-config={cluster_yml}")
    assert run.proc.returncode == 4, run.output
    assert "--k4w-out is required" in run.output


def test_windows_spec_refuses_an_ubuntu_profile(run_spec, cluster_yml):
    run = run_spec(WINDOWS, "--hosts=winrm://vagrant:vagrant@127.0.0.1:1?no_ssl=true", *_box_args(cluster_yml))
    assert run.proc.returncode == 4, run.output
    assert "box ubuntu-1604 is an ubuntu box; this is the windows spec" in run.output


def test_unreachable_ssh_host_fails_every_check_fast(run_spec, cluster_yml, closed_port):
    run = run_spec(UBUNTU, f"--hosts=ssh://vagrant@127.0.0.1:{closed_port}", *_box_args(cluster_yml), timeout=60)
    assert run.proc.returncode == 1, run.output
    res = run.result
    assert res["passed"] == 0 and res["skipped"] == 0 and res["xfailed"] == 0
    assert res["failed"] + res["errors"] > 20
    assert "cannot be reached, so no check of it ran" in run.output
    junit = _junit_counts(run.junit)
    assert junit["failures"] + junit["errors"] == junit["tests"] and junit["skipped"] == 0


def test_unreachable_winrm_host_fails_every_check(run_spec, cluster_yml, closed_port):
    url = f"--hosts=winrm://vagrant:vagrant@127.0.0.1:{closed_port}?no_ssl=true"
    run = run_spec(WINDOWS, url, *_box_args(cluster_yml, "windows-1803"), timeout=60)
    assert run.proc.returncode == 1, run.output
    assert run.result["passed"] == 0 and run.result["skipped"] == 0
    assert run.result["errors"] == _junit_counts(run.junit)["tests"]
    assert "vagrant:vagrant" not in run.output.replace(url, "")  # the password only where we typed it


def test_local_run_counts_add_up_and_profile_deselection_is_reported(run_spec, profile_dir, cluster_yml):
    # The plumbing on a real host (this machine, through testinfra's local backend): every
    # check runs and is counted once; none is skipped; the profile's skip_checks are listed.
    profile = profile_dir / "ubuntu-1604.yml"
    data = yaml.safe_load(profile.read_text())
    data["skip_checks"] = {"kubernetes_binaries": "dl.k8s.io unreachable from CI"}
    profile.write_text(yaml.safe_dump(data))
    run = run_spec(UBUNTU, "--hosts=local://", *_box_args(cluster_yml))
    res = run.result
    assert res is not None, run.output
    junit = _junit_counts(run.junit)
    assert res["skipped"] == 0 and junit["skipped"] == 0
    assert res["passed"] + res["failed"] + res["errors"] == junit["tests"]
    # kubernetes_binaries: everything 04-kubernetes.sh installs (kubelet enabled, its unit, 3 binaries,
    # the CNI plugins); the containerd era's checks (containerd, containerd_running and containerd's
    # proxy) do not apply to a Docker-era box, whose profile pins no components.containerd.
    # imported_images: the images a downloads.images: cache bake imports (containerd's and Docker's check); none here.
    assert sorted(d["check"] for d in res["deselected"]) == (["containerd"] * 5 + ["containerd_running"] * 2 + ["imported_images"] * 2
                                                             + ["kubelet"] + ["kubernetes_binaries"] * 6 + ["proxy"])
    assert "kubernetes_binaries (6 tests): ubuntu-1604.yml skip_checks: dl.k8s.io unreachable from CI" in run.output
    assert "kubelet (1 test): stage box: only true once cluster-up has joined the node" in run.output
    assert "containerd (5 tests): the profile pins no components.containerd: this box's era has none" in run.output
    assert "test_kubernetes_binary_version" not in run.junit.read_text()
    summary = re.search(r"=+ (.*) in [\d.]+s =+\s*$", run.proc.stdout).group(1)
    assert "17 deselected" in summary and "skipped" not in summary


def test_unknown_check_name_in_skip_checks_is_an_error(run_spec, profile_dir, cluster_yml):
    profile = profile_dir / "ubuntu-1604.yml"
    data = yaml.safe_load(profile.read_text())
    data["skip_checks"] = {"kubernetes_binarys": "typo"}
    profile.write_text(yaml.safe_dump(data))
    run = run_spec(UBUNTU, "--hosts=local://", *_box_args(cluster_yml))
    assert run.proc.returncode == 4, run.output
    assert "skip_checks names no check of this spec: kubernetes_binarys" in run.output


def test_a_skip_inside_a_spec_is_reported_as_a_failure(tmp_path, cluster_yml):
    spec = tmp_path / "test_skipping_spec.py"
    spec.write_text(
        "import pytest\n"
        "pytestmark = pytest.mark.k4w_spec('ubuntu')\n"
        "@pytest.mark.k4w_check('swap')\n"
        "def test_gives_up(host):\n"
        "    pytest.skip('tool missing')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", str(spec), "-p", "k4w.verify.specs.conftest", "-p", "no:cacheprovider",
         "-p", "no:hypothesispytest",
         f"--rootdir={tmp_path}", "--hosts=local://", *_box_args(cluster_yml)],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "1 failed" in proc.stdout and "skipped" not in proc.stdout.splitlines()[-1]
    assert "k4w specs do not skip; this check did not run" in proc.stdout
