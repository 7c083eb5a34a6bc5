"""ISO checks before Packer starts, the hash cache, and `iso-add`."""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import os

import pytest
import yaml

from k4w.media import iso, iso_add
from k4w.model import profiles
from k4w.bake import commands
from k4w.infra.errors import K4wError
from rich.console import Console
from tests.bake.conftest import repo  # noqa: F401 - the build tests' miniature repository, ISOs included


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_matching_iso_passes_and_its_hash_is_cached(repo, monkeypatch):
    profile = profiles.load("windows-1803")
    check = iso.check_iso(profile, repo.out)
    assert check.mode == "local" and check.actual == check.expected and not check.cached
    assert (repo.out / "cache" / "iso-hashes.json").is_file()

    def no_rehash(*args, **kwargs):
        raise AssertionError("the ISO was hashed again although it did not change")

    monkeypatch.setattr(iso, "sha256_file", no_rehash)
    assert iso.check_iso(profile, repo.out).cached


def test_changed_iso_is_hashed_again(repo):
    profile = profiles.load("windows-1803")
    iso.check_iso(profile, repo.out)
    path = repo.isos["windows-1803"]
    path.write_bytes(b"tampered" + path.read_bytes()[8:])
    with pytest.raises(iso.IsoError, match="checksum mismatch"):
        iso.check_iso(profile, repo.out)


def test_an_iso_rewritten_with_its_old_size_and_mtime_is_hashed_again(repo):
    profile = profiles.load("windows-1803")
    iso.check_iso(profile, repo.out)
    path = repo.isos["windows-1803"]
    before = path.stat()
    path.write_bytes(b"tampered" + path.read_bytes()[8:])
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # what `touch -d` would restore
    assert path.stat().st_size == before.st_size and path.stat().st_mtime_ns == before.st_mtime_ns
    with pytest.raises(iso.IsoError, match="checksum mismatch"):
        iso.check_iso(profile, repo.out)


def test_missing_iso_says_where_to_put_it(repo):
    repo.isos["windows-1803"].unlink()
    with pytest.raises(iso.IsoError) as failure:
        iso.check_iso(profiles.load("windows-1803"), repo.out)
    message = str(failure.value)
    assert str(repo.isos["windows-1803"]) in message
    assert "invoke iso-add PATH --box windows-1803" in message


def test_unknown_checksum_tells_to_run_iso_add(repo):
    (repo.root / "iso" / "catalogue.yml").write_text("{}\n")
    with pytest.raises(iso.IsoError) as failure:
        iso.check_iso(profiles.load("windows-1803"), repo.out)
    assert "no known sha256 for windows-server-1803.iso" in str(failure.value)
    assert f"invoke iso-add {repo.isos['windows-1803']}" in str(failure.value)


def test_mismatch_shows_both_values(repo):
    path = repo.isos["ubuntu-1604"]
    expected = _sha(path)
    path.write_bytes(b"not the published image")
    with pytest.raises(iso.IsoError) as failure:
        iso.check_iso(profiles.load("ubuntu-1604"), repo.out)
    message = str(failure.value)
    assert f"expected sha256 {expected}" in message and f"actual   sha256 {_sha(path)}" in message


def test_a_caller_given_checksum_verifies_an_image_the_catalogue_does_not_know(repo):
    """The CI end-to-end run makes its base disk itself and hands the runner its sha256."""
    (repo.root / "iso" / "catalogue.yml").write_text("{}\n")
    path = repo.isos["windows-1803"]
    check = iso.check_iso(profiles.load("windows-1803"), repo.out, path, expected_sha256=_sha(path))
    assert check.actual == check.expected == _sha(path)
    with pytest.raises(iso.IsoError, match="given by the caller"):
        iso.check_iso(profiles.load("windows-1803"), repo.out, path, expected_sha256="0" * 64)


def test_placeholder_checksum_in_a_profile_is_refused_by_name(repo):
    repo.edit_profile("ubuntu-1604", lambda d: d["iso"].update(sha256="TODO"))
    with pytest.raises(iso.IsoError, match=r"iso.sha256\) is 'TODO', not a sha256"):
        iso.check_iso(profiles.load("ubuntu-1604"), repo.out)


def test_ubuntu_without_local_iso_falls_back_to_the_pinned_download(repo):
    repo.edit_profile("ubuntu-1604", lambda d: d["iso"].update(url="https://old-releases.ubuntu.com/releases/16.04.7/ubuntu-16.04.7-server-amd64.iso"))
    repo.isos["ubuntu-1604"].unlink()
    check = iso.check_iso(profiles.load("ubuntu-1604"), repo.out)
    assert check.mode == "remote" and check.url.startswith("https://")


def test_no_fallback_without_a_pinned_checksum(repo):
    def remote_only(d):
        d["iso"].pop("sha256")
        d["iso"]["url"] = "https://old-releases.ubuntu.com/releases/16.04.7/ubuntu-16.04.7-server-amd64.iso"

    repo.edit_profile("ubuntu-1604", remote_only)
    repo.isos["ubuntu-1604"].unlink()
    with pytest.raises(iso.IsoError, match="ISO not found"):
        iso.check_iso(profiles.load("ubuntu-1604"), repo.out)


def test_explicit_iso_path_is_checked_against_the_expected_checksum(repo, tmp_path):
    elsewhere = tmp_path / "downloads" / "en_windows_server_1803.iso"
    elsewhere.parent.mkdir()
    elsewhere.write_bytes(repo.isos["windows-1803"].read_bytes())
    repo.isos["windows-1803"].unlink()
    check = iso.check_iso(profiles.load("windows-1803"), repo.out, elsewhere)
    assert check.path == elsewhere and check.actual == check.expected


def test_iso_add_records_checksum_keeps_header_and_links(repo, tmp_path):
    (repo.root / "iso" / "catalogue.yml").write_text("# test ISO catalogue header: must survive iso-add.\n{}\n")
    repo.isos["windows-1803"].unlink()
    source = tmp_path / "en_windows_server_version_1803_x64_dvd.iso"
    source.write_bytes(b"licensed image " * 1000)
    added = iso_add.iso_add(source, box="windows-1803", today=dt.date(2024, 5, 1))

    text = (repo.root / "iso" / "catalogue.yml").read_text()
    assert text.startswith("# test ISO catalogue header: must survive iso-add.\n")
    entry = yaml.safe_load(text)["windows-server-1803.iso"]
    assert entry == {
        "sha256": _sha(source),
        "box": "windows-1803",
        "source": "added by iso-add on 2024-05-01 from en_windows_server_version_1803_x64_dvd.iso",
        "size": source.stat().st_size,
    }
    assert added.placed == "hard-linked" and os.path.samefile(added.target, source)
    assert iso.check_iso(profiles.load("windows-1803"), repo.out).actual == _sha(source)


def test_iso_add_guesses_the_box_from_the_file_name(repo, tmp_path):
    source = tmp_path / "windows-server-1803.iso"
    source.write_bytes(b"another image")
    repo.isos["windows-1803"].unlink()
    assert iso_add.iso_add(source).box == "windows-1803"


def test_iso_add_needs_box_for_an_unknown_name(repo, tmp_path):
    source = tmp_path / "mystery.iso"
    source.write_bytes(b"?")
    with pytest.raises(iso.IsoError, match="--box"):
        iso_add.iso_add(source)


def test_iso_add_refuses_an_image_that_contradicts_the_profile(repo, tmp_path):
    source = tmp_path / "ubuntu.iso"
    source.write_bytes(b"a different ubuntu")
    with pytest.raises(iso.IsoError, match="pins"):
        iso_add.iso_add(source, box="ubuntu-1604")


def test_iso_add_across_filesystems_says_how_to_copy(repo, tmp_path, monkeypatch):
    repo.isos["windows-1803"].unlink()
    source = tmp_path / "windows-server-1803.iso"
    source.write_bytes(b"image on another drive")

    def cross_device(src, dst):
        raise OSError(18, "Invalid cross-device link")  # EXDEV, as from D:\ to C:\

    monkeypatch.setattr(iso_add.os, "link", cross_device)
    added = iso_add.iso_add(source, box="windows-1803")
    assert added.placed == "copy needed"
    assert f'--iso "{source}"' in added.note and str(added.target) in added.note
    assert not added.target.exists()
    assert yaml.safe_load((repo.root / "iso" / "catalogue.yml").read_text())["windows-server-1803.iso"]["sha256"] == _sha(source)


def _iso_image(label: str, body: bytes = b"") -> bytes:
    """A minimal ISO 9660 image: 16 system sectors, then a primary volume descriptor with the label."""
    pvd = bytearray(2048)
    pvd[0:7] = b"\x01CD001\x01"
    pvd[40:72] = label.encode().ljust(32)
    return bytes(16 * 2048) + bytes(pvd) + body


def test_iso_add_changes_nothing_when_another_image_is_in_the_way(repo, tmp_path):
    catalogue_before = (repo.root / "iso" / "catalogue.yml").read_bytes()
    source = tmp_path / "windows-server-1803.iso"
    source.write_bytes(_iso_image("CCSA_X64FRE_EN-US_DV5", b"a newer image"))
    with pytest.raises(iso.IsoError, match="different image; move it away first \\(nothing was changed\\)"):
        iso_add.iso_add(source, box="windows-1803")
    assert (repo.root / "iso" / "catalogue.yml").read_bytes() == catalogue_before


def test_iso_add_takes_back_its_link_when_the_catalogue_cannot_be_written(repo, tmp_path, monkeypatch):
    repo.isos["windows-1803"].unlink()
    source = tmp_path / "windows-server-1803.iso"
    source.write_bytes(_iso_image("CCSA_X64FRE_EN-US_DV5"))

    def full_disk(name, entry):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(iso_add, "_write_catalogue_entry", full_disk)
    with pytest.raises(OSError):
        iso_add.iso_add(source, box="windows-1803")
    assert not (repo.root / "iso" / "windows-server-1803.iso").exists()


@pytest.mark.parametrize("label,box,warned", [
    ("CCSA_X64FRE_EN-US_DV5", "windows-1803", False),
    ("Ubuntu-Server 16.04.7 LTS amd64", "windows-1803", True),
    ("Ubuntu-Server 16.04.7 LTS amd64", "ubuntu-1604", False),
    ("CCSA_X64FRE_EN-US_DV5", "ubuntu-1604", True),
])
def test_iso_add_warns_when_the_volume_label_is_not_the_profiles_os(repo, tmp_path, label, box, warned):
    source = tmp_path / "some.iso"
    source.write_bytes(_iso_image(label))
    profile = profiles.load(box)
    warning = iso.label_warning(source, profile)
    assert bool(warning) == warned, warning
    if warned:
        assert label in warning and box in warning


def test_iso_add_refuses_a_wrong_box_before_hashing(repo, tmp_path):
    source = tmp_path / "mystery.iso"
    source.write_bytes(b"?")
    console = Console(file=io.StringIO(), width=200)
    with pytest.raises(K4wError, match="--box"):
        commands.add_iso(str(source), console=console)
    assert "computing sha256" not in console.file.getvalue()


# ------------------------------------------------------------------ the virtio-win ISO of a libvirt bake

VIRTIO = {"name": "virtio-win-0.1.285.iso", "version": "0.1.285", "sha256": None, "os_folder": "2k22",
          "url": "https://fedorapeople.org/groups/virt/virtio-win/direct-downloads/archive-virtio/virtio-win-0.1.285-1/virtio-win-0.1.285.iso",
          "drivers": ["viostor", "NetKVM"]}


def _with_virtio(repo, **changes):
    repo.edit_profile("windows-1803", lambda d: d.update(virtio_win={**VIRTIO, **changes}))
    return profiles.load("windows-1803")


def test_a_libvirt_bake_refuses_a_virtio_win_iso_it_cannot_verify_naming_iso_add(repo, tmp_path):
    from k4w.bake import gate
    profile = _with_virtio(repo)
    target = gate.Target(profile, {"builders": [{"type": "qemu", "iso_checksum": "sha256:" + _sha(repo.isos["windows-1803"])}]})
    console = Console(file=io.StringIO())

    def problems():
        return [p for p in gate.box_problems(repo.cluster(), target, repo.out, console, hash_iso=True, write_cache=False)[1]
                if "virtio" in p]

    missing = problems()
    assert len(missing) == 1 and "virtio-win-0.1.285.iso, which is not in" in missing[0] and "invoke iso-add" in missing[0]
    drivers = repo.root / "iso" / "virtio-win-0.1.285.iso"
    drivers.write_bytes(b"virtio drivers " * 1000)
    unrecorded = problems()
    assert len(unrecorded) == 1 and "no known sha256 for virtio-win-0.1.285.iso" in unrecorded[0]
    assert f"invoke iso-add {drivers}" in unrecorded[0]
    iso_add.iso_add(drivers, today=dt.date(2026, 12, 2))
    assert problems() == []
    drivers.unlink()
    drivers.write_bytes(b"another release " * 1000)
    changed = problems()
    assert len(changed) == 1 and "checksum mismatch" in changed[0]
    # A Hyper-V bake (hyperv-iso) and the CI's disk image (qemu, disk_image) never ask for it.
    for builder in ({"type": "hyperv-iso"}, {"type": "qemu", "disk_image": True}):
        assert not gate.installs_with_qemu({"builders": [builder]})


def test_iso_add_records_the_virtio_win_iso_for_every_profile_that_names_it(repo, tmp_path):
    _with_virtio(repo)
    source = tmp_path / "virtio-win-0.1.285.iso"
    source.write_bytes(b"virtio drivers " * 1000)
    added = iso_add.iso_add(source, today=dt.date(2026, 12, 2))
    entry = yaml.safe_load((repo.root / "iso" / "catalogue.yml").read_text())["virtio-win-0.1.285.iso"]
    assert entry["sha256"] == _sha(source) and entry["box"] == "windows-1803"
    assert entry["source"].startswith("added by iso-add on 2026-12-02") and "virtio-win 0.1.285" in entry["source"]
    assert added.placed == "hard-linked" and "publishes no sha256" in added.note
    assert iso.virtio_win_sha256(profiles.load("windows-1803")) == _sha(source)


def test_iso_add_refuses_a_virtio_win_iso_that_contradicts_a_pin(repo, tmp_path):
    _with_virtio(repo, sha256="0" * 64)
    source = tmp_path / "virtio-win-0.1.285.iso"
    source.write_bytes(b"virtio drivers " * 1000)
    with pytest.raises(iso.IsoError, match="virtio_win.sha256"):
        iso_add.iso_add(source)
    assert not (repo.root / "iso" / "virtio-win-0.1.285.iso").exists()
