"""What render leaves in --out: one atomic switch of the managed folders, no leftovers, the
secrets file written whole and never through a link, and credential files readable only by
their owner."""

from __future__ import annotations

import json
import os
import signal
import stat
import time
from pathlib import Path

import pytest

from k4w import render
from k4w.derive.cluster import Cluster
from k4w.infra import files as outfiles
from k4w.outdir import swap
from k4w.render import escape
from tests.helpers import config_dict, invoke, start_invoke, tree_digest, write_config

PROXY_PASSWORD = "S3cret-Proxy-Pw"
PROXY = f"http://bob:{PROXY_PASSWORD}@proxy.corp.example:3128"


def managed(out: Path) -> dict[str, str]:
    """The managed folders' files and their text."""
    return {p.relative_to(out).as_posix(): p.read_text(encoding="utf-8") for p in sorted(out.rglob("*"))
            if p.is_file() and p.relative_to(out).parts[0] in swap.MANAGED}


def leftovers(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir() if p.name.startswith((".render-", ".old-", swap.SWAP_RECORD, f".{swap.SWAP_RECORD}")))


@pytest.fixture
def two_renders(tmp_path):
    """Cluster A rendered into out by the real CLI, and the in-memory render of cluster B
    (another pod CIDR, and no Windows node: a different set of managed folders)."""
    config_a = write_config(tmp_path / "a.yml", config_dict())
    data_b = config_dict(**{"network.pod_cidr": "10.200.0.0/16"})
    data_b["nodes"] = data_b["nodes"][:2]
    config_b = write_config(tmp_path / "b.yml", data_b)
    out = tmp_path / "out"
    assert invoke("render", "--config", str(config_a), "--out", str(out)).returncode == 0
    files_b = render.render_files(Cluster.load(config_b), out)
    assert not any(rel.startswith("nodes/") for rel in files_b) and managed(out).keys() != files_b.keys()
    return out, config_b, files_b


class Crash(BaseException):
    """Stands in for the process dying: nothing in k4w handles it."""


def fail_rename_after(monkeypatch, count: int, exc: BaseException) -> None:
    real = Path.rename
    calls = {"n": 0}

    def rename(self, target):
        calls["n"] += 1
        if calls["n"] == count:
            raise exc
        return real(self, target)

    monkeypatch.setattr(Path, "rename", rename)


def test_a_crash_in_the_middle_of_the_swap_is_finished_by_the_next_command(two_renders, tmp_path, monkeypatch):
    out, config_b, files_b = two_renders
    before = managed(out)
    fail_rename_after(monkeypatch, 3, Crash())  # packer/ moved out and in, http/ moved out: mid-swap
    with pytest.raises(Crash):
        render.write_atomically(files_b, out)
    monkeypatch.undo()
    mixed = managed(out)
    assert mixed != before and mixed != files_b  # the test really interrupted a swap
    assert (out / swap.SWAP_RECORD).is_file()

    # Any task that holds --out finishes the committed swap before it reads; test-box then
    # stops at its first check (no box here), after the swap is complete.
    result = invoke("test-box", "ubuntu-1604", "--config", str(config_b), "--out", str(out))
    assert result.returncode == 1 and "no box catalogue" in result.stderr, result.stdout + result.stderr
    assert managed(out) == files_b
    assert leftovers(out) == []


def test_ctrl_c_during_the_swap_still_leaves_the_whole_new_render(two_renders, monkeypatch):
    out, _, files_b = two_renders
    fail_rename_after(monkeypatch, 2, KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        render.write_atomically(files_b, out)
    assert managed(out) == files_b
    assert leftovers(out) == []


def test_a_failure_before_the_commit_leaves_out_as_it_was(two_renders, monkeypatch):
    out, _, files_b = two_renders
    before = tree_digest(out)
    real = outfiles.write_file

    def full_disk(path, *args, **kwargs):
        if path.name == swap.SWAP_RECORD:
            raise OSError(28, "No space left on device", str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(outfiles, "write_file", full_disk)
    with pytest.raises(OSError):
        render.write_atomically(files_b, out)
    assert tree_digest(out) == before
    assert leftovers(out) == []


def test_leftover_staging_and_trash_folders_are_swept_by_the_next_render(tmp_path):
    out = tmp_path / "out"
    for name in (".render-abc123", ".old-def456", ".old-x"):
        (out / name / "packer").mkdir(parents=True)
        (out / name / "packer" / "stale.json").write_text("{}")
    result = invoke("render", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert leftovers(out) == []
    assert (out / "packer" / "windows-1803.pkr.hcl").is_file()


# A sitecustomize for the real CLI: each rename of a folder inside $K4W_TEST_SLOW_SWAP takes a
# while, so a test can signal a render in the middle of its swap (a slow disk, or a busy one).
SLOW_SWAP = """
import os, pathlib, time
_rename = pathlib.Path.rename
def rename(self, target):
    where = os.environ.get("K4W_TEST_SLOW_SWAP")
    if where and pathlib.Path(where) in pathlib.Path(self).parents:
        time.sleep(0.4)
    return _rename(self, target)
pathlib.Path.rename = rename
"""


def test_sigterm_during_the_swap_finishes_it_then_exits_143(two_renders, tmp_path):
    out, config_b, files_b = two_renders
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SLOW_SWAP)
    env = {"PYTHONPATH": str(site), "K4W_TEST_SLOW_SWAP": str(out)}
    proc = start_invoke("render", "--config", str(config_b), "--out", str(out), env=env)
    deadline = time.monotonic() + 120
    while not (out / swap.SWAP_RECORD).exists():  # committed: the folders are being switched
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    output = proc.communicate(timeout=120)[0]
    assert proc.returncode == 143, output   # k4w.infra.signals: 128 + SIGTERM, after the swap finished
    assert "Traceback" not in output and "terminated (SIGTERM)" in output, output
    assert managed(out) == files_b
    assert leftovers(out) == []


def test_doctor_and_dry_runs_report_a_swap_a_killed_render_left(two_renders, monkeypatch):
    out, config_b, files_b = two_renders
    fail_rename_after(monkeypatch, 3, Crash())  # stands in for SIGKILL in the middle of the swap
    with pytest.raises(Crash):
        render.write_atomically(files_b, out)
    monkeypatch.undo()
    for task in (("doctor",), ("plan", "--dry-run"), ("cluster-up", "--dry-run")):
        result = invoke(*task, "--config", str(config_b), "--out", str(out))
        output = result.stdout + result.stderr
        assert "holds an unfinished render" in output and f"invoke render --out {out}" in output, (task, output)
    assert (out / swap.SWAP_RECORD).is_file()  # readers without the lock change nothing


# ------------------------------------------------------------------ the secrets file


@pytest.mark.parametrize("content", ["", '{"admin_pass', "[]", '{"admin_password": ""}'], ids=["empty", "truncated", "not an object", "no password"])
def test_a_corrupt_secrets_file_is_replaced_with_a_warning_naming_it(content, tmp_path):
    out = tmp_path / "out"
    secrets = out / "secrets" / "windows-1803.json"
    secrets.parent.mkdir(parents=True)
    secrets.write_text(content)
    result = invoke("render", "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"warning: {secrets}" in result.stdout and "replaced by new secrets" in result.stdout
    password = json.loads(secrets.read_text())["admin_password"]
    assert len(password) >= 24
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o600
    unattend = (out / "http" / "windows-1803" / "Autounattend.xml").read_text()
    assert escape.unattend_password(password, "AdministratorPassword") in unattend


def test_a_full_disk_while_writing_secrets_leaves_no_half_file(tmp_path, monkeypatch):
    """A full disk is simulated in-process: fsync of the temp file fails with ENOSPC (mounting a
    small tmpfs needs root)."""
    out = tmp_path / "out"

    def no_space(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(OSError) as failure:
        render.load_secrets(out, "windows-1803")
    assert failure.value.filename == str(render.secrets_path(out, "windows-1803"))
    assert list((out / "secrets").iterdir()) == []  # neither the file nor its temp file


@pytest.mark.parametrize("where", ["file", "folder"])
def test_a_link_in_place_of_the_secrets_is_refused_and_nothing_is_written_through_it(where, tmp_path):
    out, outside = tmp_path / "out", tmp_path / "outside"
    outside.mkdir()
    out.mkdir()
    if where == "file":
        (out / "secrets").mkdir()
        link, target = out / "secrets" / "windows-1803.json", outside / "stolen.json"
        link.symlink_to(target)  # dangling: a write through it would create the target
    else:
        link, target = out / "secrets", outside
        link.symlink_to(target, target_is_directory=True)
    result = invoke("render", "--out", str(out))
    assert result.returncode == 1
    assert f"{link} is a symbolic link" in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert list(outside.iterdir()) == []
    assert not (out / "packer").exists()


# ------------------------------------------------------------------ modes


def test_every_rendered_file_holding_a_credential_is_readable_by_its_owner_only(tmp_path):
    config = write_config(tmp_path / "c.yml", config_dict(**{"proxy.http": PROXY, "proxy.https": PROXY}))
    out = tmp_path / "out"
    result = invoke("render", "--config", str(config), "--out", str(out))
    assert result.returncode == 0, result.stderr
    admin = json.loads((out / "secrets" / "windows-1803.json").read_text())["admin_password"]
    credentials = [PROXY_PASSWORD, admin, escape.unattend_password(admin, "AdministratorPassword"),
                   escape.unattend_password(admin, "Password")]
    holding = {p.relative_to(out).as_posix(): stat.S_IMODE(p.stat().st_mode)
               for p in out.rglob("*") if p.is_file() and any(c in p.read_text(errors="replace") for c in credentials)}
    # The files known to carry one must be among them, so this test cannot pass by finding none.
    assert {"http/windows-1803/Autounattend.xml", "secrets/windows-1803.json"} <= set(holding)
    # Packer takes the proxy's credentials from its environment, not from the template.
    assert not {rel for rel in holding if rel.startswith("packer/")}
    # Packer's HTTP server serves preseed.cfg: it holds none (the boot line brings them, issue 21.5).
    assert "http/ubuntu-1604/preseed.cfg" not in holding
    assert {rel: mode for rel, mode in holding.items() if mode != 0o600} == {}


# ------------------------------------------------------------------ the Windows box user's password


def test_the_box_user_password_is_random_private_and_survives_every_render(tmp_path):
    out = tmp_path / "out"
    assert invoke("render", "--out", str(out)).returncode == 0
    path = out / "secrets" / "box-user.json"
    password = json.loads(path.read_text())["password"]
    assert len(password) >= 24 and password != "vagrant"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    unattend = (out / "http" / "windows-1803" / "Autounattend.xml").read_text()
    assert escape.unattend_password(password, "Password") in unattend
    assert escape.unattend_password("vagrant", "Password") not in unattend
    # where the cluster Vagrantfile reads it; the password itself is in no rendered file but the answer file
    cluster = json.loads((out / "vagrant" / "cluster.json").read_text())
    assert cluster["box_user_secrets"] == str(path.resolve())
    assert not [p for p in out.rglob("*") if p.is_file() and p != path and password in p.read_text(errors="replace")]
    # kept across renders (a VM keeps the password of the box it was made from)
    assert invoke("render", "--out", str(out)).returncode == 0
    assert json.loads(path.read_text())["password"] == password


def test_an_unreadable_box_user_password_stops_render_instead_of_locking_vagrant_out(tmp_path):
    out = tmp_path / "out"
    path = out / "secrets" / "box-user.json"
    path.parent.mkdir(parents=True)
    path.write_text('{"passw')
    result = invoke("render", "--out", str(out))
    assert result.returncode != 0
    assert f"{path}" in result.stdout + result.stderr and "holds no readable box user password" in result.stdout + result.stderr
    assert path.read_text() == '{"passw'
