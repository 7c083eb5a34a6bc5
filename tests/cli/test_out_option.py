"""--out through the real CLI: an unusable folder is one clear line, a second command on the same
folder is refused naming the first, a full disk names the file, logs are never written through a
link, and an error is printed once."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from invoke import Config, Context
from invoke.exceptions import Exit

import tasks
from k4w.commands import cli
from k4w import render
from k4w.outdir import swap
from tests.fakes import component_cache
from tests.helpers import ROOT, invoke

# Every task that writes under --out, and the dry runs that read it.
OUT_TASKS = [("render",), ("validate",), ("plan",), ("all",), ("cluster-up", "--dry-run"),
             ("build-ubuntu", "--dry-run"), ("build-windows", "--dry-run"), ("build", "--dry-run")]


def assert_one_clear_line(result, *needles):
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize("task", OUT_TASKS, ids=" ".join)
def test_an_out_that_is_a_file_is_one_line_naming_it(task, tmp_path):
    out = tmp_path / "a-file"
    out.write_text("not a folder\n")
    result = invoke(*task, "--out", str(out))
    assert_one_clear_line(result, f"--out {out} is a file, not a folder")
    assert out.read_text() == "not a folder\n"


@pytest.mark.parametrize("task", [("render",), ("cluster-up", "--dry-run"), ("build-ubuntu", "--dry-run")], ids=" ".join)
def test_an_out_under_a_file_is_one_line_naming_both(task, tmp_path):
    (tmp_path / "a-file").write_text("")
    out = tmp_path / "a-file" / "build"
    result = invoke(*task, "--out", str(out))
    assert_one_clear_line(result, f"--out {out} cannot be created: {tmp_path / 'a-file'} is a file")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through any permission bits; "
                    "test_a_full_or_read_only_disk_names_the_file covers the OS errors in-process")
@pytest.mark.parametrize("task", [("render",), ("plan",), ("cluster-up", "--dry-run")], ids=" ".join)
def test_a_read_only_out_is_one_line_naming_it(task, tmp_path):
    out = tmp_path / "read-only"
    out.mkdir()
    out.chmod(0o555)
    try:
        result = invoke(*task, "--out", str(out))
    finally:
        out.chmod(0o755)
    assert_one_clear_line(result, f"--out {out} is not writable")


def _task_context() -> Context:
    return Context(Config(overrides={"k4w": dict(cli.DEFAULTS)}))


@pytest.mark.parametrize("errno_, reason", [(28, "No space left on device"), (30, "Read-only file system"),
                                            (13, "Permission denied")])
def test_a_full_or_read_only_disk_names_the_file(errno_, reason, tmp_path, monkeypatch, capsys):
    """The OS error reaches the user as one line naming the file. Simulated in-process (the fsync
    of the file being written fails): making a full or read-only disk needs root to mount one."""
    out = tmp_path / "out"

    def failing(fd):
        raise OSError(errno_, reason)

    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(Exit) as stop:
        tasks.render.body(_task_context(), out=str(out))
    assert stop.value.code == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {out / 'secrets' / 'windows-1803.json'}: {reason} ("), err
    assert len(err.splitlines()) == 1
    assert not (out / "packer").exists() and not (out / "secrets" / "windows-1803.json").exists()


# ------------------------------------------------------------------ the lock


HOLDER = """
import sys, time
from k4w.outdir import lock as outlock
with outlock.hold(sys.argv[1], "invoke build-windows --out " + sys.argv[1]):
    print("held", flush=True)
    sys.stdin.read()
"""


def test_a_second_command_on_the_same_out_is_refused_naming_the_holder(tmp_path):
    out = tmp_path / "out"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], cwd=ROOT, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        result = invoke("render", "--out", str(out))
        assert_one_clear_line(result, f"{out} is in use by another k4w command",
                              f"pid {holder.pid}: invoke build-windows --out {out}")
        assert not (out / "packer").exists()
        # A dry run writes nothing and is not held up.
        assert invoke("render", "--out", str(out), "--dry-run").returncode == 0
    finally:
        holder.communicate("")
    result = invoke("render", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert (out / "packer" / "ubuntu-1604.pkr.hcl").is_file()


def test_racing_renders_each_finish_or_are_refused_and_out_ends_whole(tmp_path):
    out = tmp_path / "out"
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda _: invoke("render", "--out", str(out)), range(8)))
    for result in results:
        if result.returncode != 0:
            assert_one_clear_line(result, "is in use by another k4w command")
    assert any(r.returncode == 0 for r in results)
    assert {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()} >= {
        "packer/ubuntu-1604.pkr.hcl", "packer/windows-1803.pkr.hcl", "vagrant/cluster.json"}
    assert not any(p.name.startswith((".render-", ".old-", swap.SWAP_RECORD)) for p in out.iterdir())


# ------------------------------------------------------------------ logs


def test_a_build_log_that_is_a_link_is_refused_and_its_target_kept(tmp_path):
    out, precious = tmp_path / "out", tmp_path / "precious.txt"
    precious.write_text("keep me\n")
    (out / "logs").mkdir(parents=True)
    (out / "logs" / "ubuntu-1604.log").symlink_to(precious)
    started = time.monotonic()
    # The host check is a stand-in here (tests/fakes/packer.py's variable): the log opens after it.
    # So is the component cache (tests/fakes/component_cache.py): the build gets as far as the log.
    cache = component_cache.seeded_env(tmp_path / "cache", ROOT / "cluster.yml")
    result = invoke("build-ubuntu", "--out", str(out), env={"K4W_TEST_FAKE_HYPERV_HOST": "1", **cache})
    assert result.returncode == 1 and time.monotonic() - started < 120
    assert f"{out / 'logs' / 'ubuntu-1604.log'} is a symbolic link" in result.stderr, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert precious.read_text() == "keep me\n"
    # The error is printed once (stderr), not also in the build summary on stdout.
    assert "is a symbolic link" not in result.stdout
