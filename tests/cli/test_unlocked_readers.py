"""Every command that reads --out without its lock reports a render swap a killed process left
unfinished (k4w.outdir.swap.swap_pending), and changes nothing: doctor, and each task's --dry-run.

The commands are found, not listed: every task of tasks.py that has an --out option. A task added
later is covered without a change here."""

from __future__ import annotations

import inspect

import pytest

import tasks
from k4w.outdir import swap
from tests.helpers import config_dict, invoke, tree_digest, write_config

# Positional arguments of the tasks that have them: a value the task accepts before it reads --out.
POSITIONAL = {"test-box": ["ubuntu-1604"]}


def _out_readers() -> list[tuple[str, ...]]:
    commands = []
    for name, task in sorted(tasks.ns.tasks.items()):
        params = inspect.signature(task.body).parameters
        if "out" not in params:
            continue
        commands.append((name, *POSITIONAL.get(name, []), "--dry-run"))
        if name == "doctor":   # doctor never takes the lock, dry run or not
            commands.append((name,))
    return commands


READERS = _out_readers()


def test_the_readers_are_found():
    names = {c[0] for c in READERS}
    assert {"doctor", "render", "plan", "cluster-up", "cluster-down", "cluster-reset", "build", "test-box"} <= names, names


@pytest.fixture(scope="module")
def killed_swap(tmp_path_factory):
    """An --out with a swap that a killed render left: the commit record of a staged render, with
    packer/ already switched (what SIGKILL between two folder renames leaves)."""
    tmp = tmp_path_factory.mktemp("swap")
    config = write_config(tmp / "cluster.yml", config_dict())
    out = tmp / "out"
    assert invoke("render", "--config", str(config), "--out", str(out)).returncode == 0
    staging = out / ".render-killed"
    (staging / "packer").mkdir(parents=True)
    (out / ".old-killed").mkdir()
    (out / "packer").rename(out / ".old-killed" / "packer")
    (out / swap.SWAP_RECORD).write_text('{"staging": ".render-killed", "trash": ".old-killed", "fresh": ["packer"]}\n')
    return config, out


@pytest.mark.parametrize("command", READERS, ids=[" ".join(c) for c in READERS])
def test_a_reader_without_the_lock_reports_the_unfinished_swap_and_changes_nothing(killed_swap, command):
    config, out = killed_swap
    before = tree_digest(out)
    result = invoke(*command, "--config", str(config), "--out", str(out))
    output = " ".join((result.stdout + result.stderr).split())   # a table may wrap the message
    assert "Traceback" not in output, output
    assert "holds an unfinished render" in output and f"invoke render --out {out}" in output, (command, output)
    assert tree_digest(out) == before and (out / swap.SWAP_RECORD).is_file()
