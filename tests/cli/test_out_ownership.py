"""What a render may replace in --out, through the real CLI: only folders it made itself. The
repository, a folder holding it, the user's own folders and links at the names a render owns,
and a file dropped into a rendered folder are refused, naming them, and nothing is deleted; an
empty --out and a bad config are refused before --out or its lock exist."""

from __future__ import annotations

import subprocess

import pytest

from k4w import render
from k4w.render import owned
from tests.helpers import ROOT, config_dict, invoke, tree_digest, write_config


def assert_refused(result, *needles):
    output = result.stdout + result.stderr
    assert result.returncode == 1 and "Traceback" not in output, output
    for needle in needles:
        assert needle in result.stderr, result.stderr


def git_status(*paths: str) -> str:
    return subprocess.run(["git", "status", "--porcelain", "--", *paths], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout


def test_a_render_into_the_repository_is_refused_and_deletes_nothing():
    owned_names = ("vagrant", "packer", "http", "manifests", "kubeadm", "nodes", "secrets")
    before = tree_digest(ROOT / "vagrant"), git_status(*owned_names)
    result = invoke("render", "--out", str(ROOT))
    assert_refused(result, f"--out {ROOT} is the k4w repository")
    assert (tree_digest(ROOT / "vagrant"), git_status(*owned_names)) == before


def test_an_out_holding_the_repository_is_refused():
    # A dry run: the same check on --out as a real run, and nothing is written outside the
    # repository should that check ever regress.
    result = invoke("render", "--dry-run", "--out", str(ROOT.parent))
    assert_refused(result, f"--out {ROOT.parent} is a folder holding the k4w repository")


@pytest.mark.parametrize("name", ["packer", "vagrant"])
def test_the_users_own_folder_at_a_name_render_owns_is_refused_naming_it_and_kept(name, tmp_path):
    out = tmp_path / "out"
    (out / name).mkdir(parents=True)
    (out / name / "my-template.json").write_text("{}\n")
    result = invoke("render", "--out", str(out))
    assert_refused(result, str(out / name), "was not made by `invoke render`")
    assert (out / name / "my-template.json").read_text() == "{}\n"
    assert not (out / "secrets").exists() and not (out / "manifests").exists()  # refused before any write


def test_a_file_dropped_into_a_rendered_folder_is_refused_naming_it_and_kept(tmp_path):
    out = tmp_path / "out"
    assert invoke("render", "--out", str(out)).returncode == 0
    notes = out / "manifests" / "my-notes.txt"
    notes.write_text("mine\n")
    before = tree_digest(out)
    result = invoke("render", "--out", str(out))
    assert_refused(result, str(notes), "was not written by k4w")
    assert tree_digest(out) == before


def test_a_link_at_a_folder_render_owns_is_refused_naming_it_and_its_target_kept(tmp_path):
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    assert invoke("render", "--out", str(out)).returncode == 0
    elsewhere.mkdir()
    (elsewhere / "precious.txt").write_text("keep me\n")
    (out / "packer").rename(tmp_path / "rendered-packer")
    (out / "packer").symlink_to(elsewhere, target_is_directory=True)
    result = invoke("render", "--out", str(out))
    assert_refused(result, f"{out / 'packer'} is a symbolic link")
    assert (out / "packer").is_symlink() and (elsewhere / "precious.txt").read_text() == "keep me\n"


def test_a_render_replaces_its_own_render_and_keeps_what_a_build_staged(tmp_path):
    out = tmp_path / "out"
    assert invoke("render", "--out", str(out)).returncode == 0
    staged = out / "http" / "ubuntu-1604" / "components" / "kubelet"  # k4w.media.build_media.stage's place
    staged.parent.mkdir(parents=True)
    staged.write_text("x")
    result = invoke("render", "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    assert (out / owned.MANIFEST).is_file() and (out / "packer" / "ubuntu-1604.pkr.hcl").is_file()


def test_a_build_staged_folder_the_last_render_wrote_nothing_into_is_still_ours(tmp_path):
    # A containerd-era render may write no file under http/, and `build-ubuntu` then stages the
    # components there: the next render must not take that folder for the user's.
    out = tmp_path / "out"
    (out / "http" / "ubuntu-2404" / "components").mkdir(parents=True)
    (out / "http" / "ubuntu-2404" / "components" / "kubelet").write_text("x")
    (out / owned.MANIFEST).write_text(owned.manifest_text({"packer/ubuntu-2404.pkr.hcl": ""}, ("packer", "http")))
    owned.check(out, ("packer", "http"))
    (out / "http" / "ubuntu-2404" / "user-data").write_text("mine\n")
    with pytest.raises(owned.NotOurs, match="was not made by `invoke render`"):
        owned.check(out, ("packer", "http"))


def test_an_empty_out_is_refused_not_taken_for_the_default(tmp_path):
    result = invoke("render", "--out", "", cwd=ROOT)
    assert_refused(result, "--out is empty")


@pytest.mark.parametrize("task", [("render",), ("plan",), ("cluster-up",), ("build-ubuntu",)], ids=" ".join)
@pytest.mark.parametrize("config", ["missing", "bad"])
def test_a_bad_or_missing_config_creates_neither_out_nor_its_lock(task, config, tmp_path):
    out = tmp_path / "deep" / "out"
    path = tmp_path / "cluster.yml"
    if config == "bad":
        write_config(path, config_dict(**{"network.backend": "carrier-pigeon"}))
    result = invoke(*task, "--config", str(path), "--out", str(out))
    assert_refused(result, "cluster.yml")
    assert not (tmp_path / "deep").exists()


def test_no_lock_file_is_left_in_out_after_a_command(tmp_path):
    out = tmp_path / "out"
    assert invoke("render", "--out", str(out)).returncode == 0
    assert not (out / ".lock").exists()
    assert invoke("render", "--out", str(out)).returncode == 0  # and the next one locks a new one
    assert not (out / ".lock").exists()


def test_an_iso_that_is_a_folder_is_named_as_not_a_file(tmp_path):
    result = invoke("build-windows", "--dry-run", "--out", str(tmp_path / "out"), "--iso", str(tmp_path))
    assert f"--iso {tmp_path} is not a file" in result.stdout + result.stderr, result.stdout + result.stderr


def test_a_caller_that_opened_the_lock_file_as_its_holder_deleted_it_locks_the_new_one(tmp_path, monkeypatch):
    """The race the deletion on release opens (k4w.infra.filelock): a second caller opened OUT/.lock just
    before the holder deleted it, then gets the lock on the deleted file. It must notice and lock
    the file now at the path, or two commands would hold the same --out."""
    import os

    from k4w.infra import filelock

    path = tmp_path / ".lock"
    holder = filelock.acquire(path)
    stale = os.open(path, os.O_RDWR)  # the second caller's open, before the holder releases
    filelock.release(holder, path)
    real_open, opened = os.open, []

    def open_(file, flags, mode=0o777):
        opened.append(file)
        return stale if len(opened) == 1 else real_open(file, flags, mode)

    monkeypatch.setattr(filelock.os, "open", open_)
    fd = filelock.acquire(path)
    monkeypatch.undo()
    assert len(opened) == 2 and os.fstat(fd).st_ino == os.stat(path).st_ino  # the file at the path
    with pytest.raises(BlockingIOError):
        filelock.acquire(path)  # and it really holds it
    filelock.release(fd, path)
    assert not path.exists()
