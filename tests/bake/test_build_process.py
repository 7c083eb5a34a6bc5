"""The Packer process of a real `invoke build-ubuntu` (the fake `packer` first on PATH): its
environment carries cluster.yml's proxy, a terminating signal to invoke or the profile's
build.timeout_minutes stops its whole process group, and no partial box is left."""

from __future__ import annotations

import signal
import subprocess
import time

import pytest

from tests.helpers import config_dict, gone_within, invoke, start_invoke, write_config

from .conftest import edited_boxes

PROXY = "http://alice:S3cret@proxy.corp.example:3128"


def _cancellable(packer) -> None:
    """A build that writes its partial box, starts a plugin (which ignores Ctrl-C), and waits for
    an interrupt; the Windows transcript only paces the fake."""
    packer.scenario("ubuntu-1604", "windows-interrupted.txt", exit=1, write_box="before_wait",
                    wait_for_interrupt=True, plugin=True)


def _wait_until_waiting(process: subprocess.Popen, packer, out) -> None:
    partial = out / "boxes" / ".partial" / "ubuntu-1604-hyperv.box"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if len(packer.pids()) == 2 and partial.is_file():
            return
        assert process.poll() is None, process.stdout.read()
        time.sleep(0.1)
    pytest.fail("the fake packer never reached its wait")


def _assert_stopped_and_clean(packer, out) -> None:
    survivors = gone_within(packer.pids())
    assert len(packer.pids()) == 2 and survivors == [], f"still running: {survivors}"
    assert list((out / "boxes").glob("**/*.box")) == []


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="POSIX signals")
def test_sigterm_to_invoke_stops_packers_group_and_leaves_no_partial_box(repo_packer, tmp_path):
    # SIGHUP takes the same path: test_runner.py sends it in-process.
    _cancellable(repo_packer)
    config = write_config(tmp_path / "cluster.yml", config_dict())
    out = tmp_path / "out"
    process = start_invoke("build-ubuntu", "--config", str(config), "--out", str(out))
    try:
        _wait_until_waiting(process, repo_packer, out)
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 1, output
    assert "SIGTERM: asking Packer to cancel" in output
    assert "ubuntu-1604: build interrupted" in output and "(SIGTERM received)" in output
    assert "Cleanly cancelled builds" in (out / "logs" / "ubuntu-1604.log").read_text()  # Packer cancelled itself
    _assert_stopped_and_clean(repo_packer, out)


def test_a_build_that_outlives_its_timeout_is_stopped(repo_packer, tmp_path):
    _cancellable(repo_packer)
    env = edited_boxes(tmp_path, "ubuntu-1604", "timeout_minutes: 180", "timeout_minutes: 0.05")  # 3 s
    config = write_config(tmp_path / "cluster.yml", config_dict())
    out = tmp_path / "out"
    started = time.monotonic()
    result = invoke("build-ubuntu", "--config", str(config), "--out", str(out), env=env)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "ubuntu-1604: build timed out" in output and "longer than 0.05 min (build.timeout_minutes in" in output
    assert "TIMED OUT" in output
    assert time.monotonic() - started < 60  # not the fake's own 30 s wait for an interrupt
    _assert_stopped_and_clean(repo_packer, out)


def test_a_timeout_that_is_not_a_positive_number_is_refused_by_name(repo_packer, tmp_path):
    env = edited_boxes(tmp_path, "ubuntu-1604", "timeout_minutes: 180", "timeout_minutes: soon")
    config = write_config(tmp_path / "cluster.yml", config_dict())
    result = invoke("build-ubuntu", "--config", str(config), "--out", str(tmp_path / "out"), env=env)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"{tmp_path / 'boxes' / 'ubuntu-1604.yml'}: build.timeout_minutes must be a positive number" in result.stderr
    assert repo_packer.builds() == []


def test_packer_gets_the_proxy_of_cluster_yml_and_never_the_hosts(repo_packer, tmp_path):
    config = write_config(tmp_path / "cluster.yml", config_dict(**{"proxy.http": PROXY, "proxy.https": PROXY}))
    host = {"HTTP_PROXY": "http://host-proxy.invalid:1", "https_proxy": "http://host-proxy.invalid:2"}
    result = invoke("build-ubuntu", "--config", str(config), "--out", str(tmp_path / "out"), env=host)
    assert result.returncode == 0, result.stdout + result.stderr
    env = repo_packer.builds()[0]["proxy_env"]
    assert env["HTTP_PROXY"] == env["http_proxy"] == PROXY and env["HTTPS_PROXY"] == env["https_proxy"] == PROXY
    no_proxy = env["NO_PROXY"].split(",")
    # The build VM's private address (WinRM) never goes to the proxy; the cluster's own networks neither.
    assert {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "192.168.250.0/24", "localhost"} <= set(no_proxy)
    assert env["no_proxy"] == env["NO_PROXY"]
    log = (tmp_path / "out" / "logs" / "ubuntu-1604.log").read_text()
    assert "# export HTTP_PROXY=http://***@proxy.corp.example:3128" in log and "S3cret" not in log


def test_a_truncated_box_is_rebuilt_not_skipped(repo_packer, tmp_path):
    config = write_config(tmp_path / "cluster.yml", config_dict())
    out = tmp_path / "out"
    assert invoke("build-ubuntu", "--config", str(config), "--out", str(out)).returncode == 0
    box = out / "boxes" / "ubuntu-1604-hyperv.box"
    size = box.stat().st_size
    with open(box, "r+b") as fh:
        fh.truncate(size // 2)
    again = invoke("build-ubuntu", "--config", str(config), "--out", str(out))
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"box file {box} is {size // 2} bytes but" in again.stdout and "truncated" in again.stdout
    assert len(repo_packer.builds()) == 2 and box.stat().st_size == size
