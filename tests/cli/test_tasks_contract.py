"""Task and option names are a contract with users, scripts and CI: the real CLI keeps every one,
and the defaults of --config/--out/--dry-run come from Invoke configuration."""

from __future__ import annotations

import re

import pytest

from tests.helpers import invoke

# Every task with its short and long option names, as `invoke --help TASK` lists them.
TASKS = {
    "all": {"-c --config", "-d --dry-run", "-o --out"},
    "build": {"-c --config", "-d --dry-run", "-f --force", "-o --out"},
    "build-ubuntu": {"-c --config", "-d --dry-run", "-f --force", "-i --iso", "-o --out"},
    "build-windows": {"-c --config", "-d --dry-run", "-f --force", "-i --iso", "-o --out"},
    "bundle": {"--box", "--config", "--dry-run", "--file"},
    "bundle-import": {"--config", "--dry-run", "--file"},
    "cache-prune": {"--also", "--cache", "--config", "--dry-run"},
    "cluster-down": {"-c --config", "-d --dry-run", "-o --out"},
    "cluster-reset": {"-c --config", "-d --dry-run", "-o --out"},
    "cluster-test": {"-c --config", "-d --dry-run", "-o --out"},
    "cluster-up": {"-c --config", "-d --dry-run", "-o --out"},
    "doctor": {"-c --config", "-d --dry-run", "-f --offline", "-o --out", "-s --stage", "-n --online"},
    "e2e": {"-b --box", "-c --cluster", "-d --dry-run", "-f --offline", "-k --keep", "-o --out", "-p --provider"},
    "fetch": {"-a --cache", "-b --box", "-c --config", "-d --dry-run", "-i --images"},
    "inventory": {"-c --config", "-d --dry-run", "-o --out"},
    "iso-add": {"-b --box", "-p --path"},
    "network-up": {"-c --config", "-d --dry-run"},
    "pin": {"--box", "--component", "--config", "--dry-run", "--replace"},
    "pin-images": {"--box", "--config", "--dry-run", "--replace"},
    "plan": {"-c --config", "-d --dry-run", "-o --out"},
    "render": {"-c --config", "-d --dry-run", "-o --out"},
    "schema": {"--check", "--dry-run"},
    "test-box": {"-b --box", "-c --config", "-d --dry-run", "-o --out"},
    "validate": {"-c --config", "-d --dry-run", "-o --out"},
}


def test_invoke_list_names_exactly_the_tasks():
    result = invoke("--list")
    assert result.returncode == 0, result.stderr
    assert set(re.findall(r"^  (\S+)", result.stdout, re.M)) == set(TASKS)


@pytest.mark.parametrize("task", sorted(TASKS))
def test_each_task_keeps_its_options(task):
    result = invoke("--help", task)
    assert result.returncode == 0, result.stderr
    options = result.stdout.split("Options:", 1)[1]
    flags = {f"{short} {long}".strip() for short, long in re.findall(r"^\s+(?:(-\w)(?: \w+)?, )?(--[a-z-]+)", options, re.M)}
    assert flags == TASKS[task]


def test_out_defaults_to_invoke_configuration(tmp_path):
    out = tmp_path / "from-env"
    result = invoke("render", env={"INVOKE_K4W_OUT": str(out)})
    assert result.returncode == 0, result.stderr
    assert (out / "vagrant" / "cluster.json").is_file()


def test_an_option_wins_over_invoke_configuration(tmp_path):
    configured, given = tmp_path / "configured", tmp_path / "given"
    result = invoke("render", "--out", str(given), env={"INVOKE_K4W_OUT": str(configured)})
    assert result.returncode == 0, result.stderr
    assert (given / "vagrant" / "cluster.json").is_file() and not configured.exists()


def test_config_comes_from_invoke_configuration_too(tmp_path):
    missing = tmp_path / "elsewhere.yml"
    result = invoke("render", "--out", str(tmp_path / "out"), env={"INVOKE_K4W_CONFIG": str(missing)})
    assert result.returncode == 1
    output = " ".join((result.stdout + result.stderr).split())
    assert f"{missing}: 1 problem(s): - file not found" in output, output
