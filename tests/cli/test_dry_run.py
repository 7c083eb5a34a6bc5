"""--dry-run through the real CLI: a task shows what it would run and writes nothing under --out."""

from __future__ import annotations

import os
import shlex
import stat

import pytest

from tests.helpers import invoke, tree_digest

# Each task with a text its dry run must show: the plan of what would happen, not a vague promise.
SHOWS = {
    "render": "packer/ubuntu-1604.pkr.hcl",
    "validate": "packer validate",
    "plan": "Build plan (a Hyper-V host runs these",
    "all": "shellcheck",
    "cluster-up": "vagrant up --provider=hyperv worker-win",
    "build-windows": "packer build -machine-readable -force -on-error=cleanup",
    "build-ubuntu": "packer build -machine-readable -force -on-error=cleanup",
}


@pytest.mark.parametrize("task", list(SHOWS))
def test_dry_run_does_not_create_out(task, tmp_path):
    out = tmp_path / "never-created"
    # A build's dry run refuses on a host without Hyper-V, as the build does; here it stands in for one.
    env = {"K4W_TEST_FAKE_HYPERV_HOST": "1"} if task.startswith("build-") else None
    result = invoke(task, "--out", str(out), "--dry-run", env=env)
    output = result.stdout + result.stderr
    # build-windows may rightly fail here: a host without the Windows ISO, and it says so.
    assert result.returncode == 0 or task == "build-windows", output
    assert "Traceback" not in output
    assert SHOWS[task] in output, output
    assert not out.exists()


@pytest.mark.parametrize("task", list(SHOWS))
def test_dry_run_leaves_a_rendered_out_byte_for_byte(task, rendered):
    before = tree_digest(rendered)
    result = invoke(task, "--out", str(rendered), "--dry-run")
    assert SHOWS[task] in result.stdout + result.stderr
    assert tree_digest(rendered) == before


def test_invokes_own_dry_flag_is_the_same_switch(tmp_path):
    out = tmp_path / "never-created"
    result = invoke("--dry", "render", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "would render" in result.stdout and not out.exists()


def _recording_tools(folder, log):
    """Stand-ins for the external validators that log their argv and accept everything."""
    folder.mkdir()
    for name in ("packer", "debconf-set-selections", "shellcheck", "ruby", "vagrant"):
        tool = folder / name
        # vagrant validate's acceptance is its success line (k4w.validate.vagrant_rules.SUCCESS), not only its exit code
        accept = 'echo "Vagrantfile validated successfully."\n' if name == "vagrant" else ""
        tool.write_text(f'#!/bin/sh\nprintf "%s\\n" "$0 $*" >> "{log}"\n{accept}')
        tool.chmod(tool.stat().st_mode | stat.S_IXUSR)


def _argv(command: str) -> list[str]:
    """The process a shown command starts: a leading `env K=V ...` only sets its environment."""
    words = shlex.split(command)
    if words[0] == "env":
        words = words[1:]
        while "=" in words[0]:
            words = words[1:]
    return words


def test_validate_dry_run_lists_exactly_the_commands_validate_runs(tmp_path):
    log = tmp_path / "ran.txt"
    _recording_tools(tmp_path / "bin", log)
    # An empty tools cache: k4w would prefer the pinned Packer to the stand-in on PATH (k4w.infra.tools.find).
    (tmp_path / "no-pinned-tools").mkdir()
    env = {"PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}", "K4W_TOOLS_DIR": str(tmp_path / "no-pinned-tools")}
    out = tmp_path / "out"

    dry = invoke("validate", "--out", str(out), "--dry-run", env=env)
    assert dry.returncode == 0, dry.stderr
    assert not log.exists()  # a dry run starts no validator
    assert "# in this process: parse and lint" in dry.stdout and "host/network-up.ps1" in dry.stdout
    shown = [" ".join(_argv(line[2:])) for line in dry.stdout.splitlines() if line.startswith("$ ")]

    real = invoke("validate", "--out", str(out), env=env)
    assert real.returncode == 0, real.stdout + real.stderr
    assert shown == log.read_text().splitlines()
