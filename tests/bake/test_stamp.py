"""The up-to-date stamp moves exactly when something that shapes the box moves."""

from __future__ import annotations

from k4w.media import iso
from k4w.model import profiles
from k4w import render
from k4w.bake import stamp

from .conftest import PROXY


def _stamp(repo, box="windows-1803", proxy=None) -> stamp.Stamp:
    cluster = repo.cluster(proxy=proxy)
    rendered = render.render_files(cluster, repo.out, secrets_for=None)
    profile = profiles.load(box)
    return stamp.compute(box, profile, rendered, iso.iso_sha256(profile))


def test_stamp_is_stable_and_covers_every_input(repo):
    first = _stamp(repo)
    assert first == _stamp(repo)
    assert set(first.inputs) == {
        "packer/windows-1803.pkr.hcl",
        "http/windows-1803/Autounattend.xml",
        "guest/windows/bake/base.ps1",
        "guest/windows/bake/docker.ps1",
        "guest/windows/node/start-node.ps1",  # folder uploaded by the file provisioner
        "vagrant/box/windows.Vagrantfile",
        "profile:windows-1803.yml",
        "iso:sha256",
    }


def test_stamp_changes_with_a_provision_script(repo):
    before = _stamp(repo)
    (repo.root / "guest" / "windows" / "node" / "start-node.ps1").write_text("$ErrorActionPreference = 'Stop'\n# v2\n")
    after = _stamp(repo)
    assert after.sha256 != before.sha256
    assert after.changed_since(before.as_record()) == ["guest/windows/node/start-node.ps1"]


def test_stamp_changes_with_the_proxy(repo):
    before = _stamp(repo, box="ubuntu-1604")
    after = _stamp(repo, box="ubuntu-1604", proxy=PROXY)
    assert after.sha256 != before.sha256
    assert set(after.changed_since(before.as_record())) == {"packer/ubuntu-1604.pkr.hcl", "http/ubuntu-1604/preseed.cfg"}


def test_stamp_changes_with_the_iso_checksum(repo):
    before = _stamp(repo, box="ubuntu-1604")
    repo.edit_profile("ubuntu-1604", lambda d: d["iso"].update(sha256="0" * 64))
    after = _stamp(repo, box="ubuntu-1604")
    assert "iso:sha256" in after.changed_since(before.as_record())


def test_stamp_ignores_the_rotated_administrator_password(repo):
    cluster = repo.cluster()
    render.render(cluster, repo.out)
    before = _stamp(repo)
    render.rotate_secrets(repo.out, "windows-1803")
    render.render(cluster, repo.out)
    assert _stamp(repo) == before


def test_referenced_files_found_inside_inline_commands(repo):
    script = repo.root / "guest" / "windows" / "bake" / "base.ps1"
    template = {"provisioners": [{"type": "shell-local", "inline": [f"pwsh -File {script}; echo done"]}]}
    assert stamp.referenced_files(template, repo.root) == [script]
