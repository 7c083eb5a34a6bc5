"""What stops a build before Packer starts, through the real CLI on the repository's own boxes,
with the fake `packer` (tests/fakes/packer.py) first on PATH: the host, the validators, the
ISO and the checksums. The real build, its --dry-run and `invoke plan` decide alike."""

from __future__ import annotations

import platform
import re
import shutil
import stat

import pytest

from tests.helpers import config_dict, invoke, write_config

from .conftest import edited_boxes

HOST_STANDIN = "K4W_TEST_FAKE_HYPERV_HOST"


@pytest.fixture
def cli(tmp_path):
    """cli(task, *options, env=None): the real invoke on a cluster.yml and --out under tmp_path."""
    config = write_config(tmp_path / "cluster.yml", config_dict())
    out = tmp_path / "out"

    def run(task: str, *options: str, env: dict | None = None):
        result = invoke(task, "--config", str(config), "--out", str(out), *options, env=env)
        result.text = result.stdout + result.stderr
        assert "Traceback" not in result.text, result.text
        return result

    run.out = out
    return run


@pytest.mark.skipif(platform.system() == "Windows", reason="checks the refusal on a host without Hyper-V")
def test_a_host_without_hyperv_is_refused_before_packer_and_the_dry_run_and_plan_say_so(repo_packer, cli, monkeypatch):
    monkeypatch.delenv(HOST_STANDIN)
    real = cli("build-ubuntu")
    dry = cli("build-ubuntu", "--dry-run")
    plan = cli("plan")
    reason = f"this is {platform.system()}, not Windows"
    assert real.returncode == 1 and reason in real.stderr and "Packer was not started" in real.stderr
    assert repo_packer.builds() == []
    assert dry.returncode == 1 and f"this host: WOULD FAIL: Hyper-V host: {reason}" in dry.stdout
    assert "packer build -machine-readable" in dry.stdout  # it still shows what it would run
    assert plan.returncode == 0 and f"BLOCKED (this host, every box): Hyper-V host: {reason}" in plan.stdout


def test_a_missing_iso_and_a_missing_pin_are_refused_alike_by_build_dry_run_and_plan(repo_packer, cli, tmp_path):
    env = edited_boxes(tmp_path, "windows-1803", "name: windows-server-1803.iso", "name: k4w-test-absent.iso")
    real, dry, plan = cli("build-windows", env=env), cli("build-windows", "--dry-run", env=env), cli("plan", env=env)
    pin = f"invoke pin windows-1803 flannel --config {tmp_path / 'cluster.yml'}"
    for result in (real, dry, plan):
        assert "ISO not found" in result.text and "k4w-test-absent.iso" in result.text, result.text
        assert pin in result.text, result.text
    assert real.returncode == 1 and dry.returncode == 1 and plan.returncode == 0
    assert "BLOCKED: box windows-1803: ISO not found" in plan.stdout
    assert repo_packer.builds() == []


def test_a_preseed_the_validators_reject_is_never_built(repo_packer, cli, tmp_path):
    env = edited_boxes(tmp_path, "ubuntu-1604", "  keyboard: us\n", '  keyboard: "us\\nbroken"\n')
    real, dry, plan = cli("build-ubuntu", env=env), cli("build-ubuntu", "--dry-run", env=env), cli("plan", env=env)
    problem = f"preseed: {cli.out / 'http' / 'ubuntu-1604' / 'preseed.cfg'}: error: parse error"
    assert real.returncode == 1 and problem in real.stderr, real.text
    assert "Packer was not started" in real.stderr
    assert repo_packer.builds() == [] and not list(cli.out.glob("boxes/*.box"))
    # The dry run validates a scratch render of its own: the same file, in a temporary folder.
    assert dry.returncode == 1 and "validate: WOULD FAIL: preseed: " in dry.stdout and "parse error" in dry.stdout, dry.text
    assert plan.returncode == 0 and f"BLOCKED (validate, every box): {problem}" in plan.stdout, plan.text


def _recording(tool: str, folder, log) -> None:
    """A wrapper first on PATH that logs each run of tool, then runs the real one."""
    real = shutil.which(tool)
    wrapper = folder / tool
    wrapper.write_text(f'#!/bin/sh\necho "$*" >> "{log}"\nexec "{real}" "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)


def test_the_validators_run_once_before_packer_for_several_boxes(repo_packer, cli, tmp_path):
    log = tmp_path / "debconf-runs.txt"
    _recording("debconf-set-selections", repo_packer.bin, log)
    # Both boxes; the Windows one stops at its own ISO, the Ubuntu one builds. The host's proxy
    # settings never reach Packer: cluster.yml (no proxy here) alone decides.
    result = cli("build", env={"HTTPS_PROXY": "http://host-proxy.invalid:2", "no_proxy": "example.org"})
    assert re.search(r"ubuntu-1604\s+built", result.stdout), result.text
    assert len(log.read_text().splitlines()) == 1  # one preseed, validated once, not per box
    [build] = repo_packer.builds()
    assert build["argv"][-1].endswith("/ubuntu-1604.pkr.hcl") and build["proxy_env"] == {}


def test_a_validator_this_host_cannot_run_is_named_not_a_refusal(tmp_path, monkeypatch):
    """A Windows build host has no debconf-set-selections: the build says which validator it
    skips, and still refuses what the validators it can run reject."""
    from k4w import render
    from k4w.infra import tools
    from k4w.bake import gate
    from k4w.derive.cluster import Cluster

    cluster = Cluster.load(write_config(tmp_path / "cluster.yml", config_dict()))
    render.render(cluster, tmp_path / "out")
    which = shutil.which
    monkeypatch.setattr(tools.shutil, "which", lambda name, *a, **k: None if name == "debconf-set-selections" else which(name, *a, **k))
    said = []
    assert gate.validation_problems(cluster, tmp_path / "out", said.append) == []
    assert said == ["not validated on this host: preseeds (debconf-set-selections is not installed; "
                    "`invoke validate` on Linux and CI check it)"]
    (tmp_path / "out" / "packer" / "ubuntu-1604.pkr.hcl").write_text("{ not hcl")
    problems = gate.validation_problems(cluster, tmp_path / "out", said.append)
    assert problems and all(p.startswith("Packer") or "ubuntu-1604.pkr.hcl" in p for p in problems), problems
