"""The parser against the real Packer binary, and the catalogue against the real Vagrant."""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile

import pytest

from k4w import profiles
from k4w.bake import catalogue, packer_cli
from k4w.bake.transcript import BuildState, parse_line

pytestmark = pytest.mark.tools


def _require(tool: str, install: str) -> str:
    path = shutil.which(tool)
    if not path:
        pytest.fail(f"'{tool}' is not installed; install it with: {install}")
    return path


def test_real_packer_transcript_parses(tmp_path):
    packer = _require("packer", "apt-get install -y packer")
    template = {
        "variables": {"pw": "{{env `K4W_ADMIN_PASSWORD`}}"},
        "sensitive-variables": ["pw"],
        "builders": [{"type": "null", "name": "hyperv-iso", "communicator": "none"}],
        "provisioners": [
            {"type": "shell-local", "inline": ["echo one, with a comma"]},
            {"type": "shell-local", "inline": ["echo two"]},
            {"type": "shell-local", "inline": ["echo broken >&2; exit 7"]},
        ],
    }
    path = tmp_path / "t.json"
    path.write_text(json.dumps(template))
    env = packer_cli.build_env(tmp_path, {"K4W_ADMIN_PASSWORD": "not-a-real-secret"})
    cmd = packer_cli.build_command(path, packer)
    run = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 1
    state = BuildState.for_template(template)
    steps = [e.text for line in run.stdout.splitlines() for e in state.feed(line) if e.kind == "step"]
    assert steps == [f"provisioner {n}/3: local shell" for n in (1, 2, 3)]
    assert state.where == "provisioner 3/3 (local shell)"
    assert state.last_error == "Script exited with non-zero exit status: 7.Allowed exit codes are: [0]"
    assert state.error_count == 1
    # Packer wrote the comma as %!(PACKER_COMMA); the parser gives it back.
    assert "%!(PACKER_COMMA)" in run.stdout
    texts = [parse_line(line).text for line in run.stdout.splitlines() if parse_line(line)]
    assert "    hyperv-iso: one, with a comma" in texts


def test_real_packer_version_is_read(tmp_path):
    _require("packer", "apt-get install -y packer")
    assert packer_cli.packer_version() >= packer_cli.MIN_VERSION


def test_vagrant_box_add_accepts_the_catalogue(repo, tmp_path):
    vagrant = _require("vagrant", "apt-get install -y vagrant")
    # A tiny but well-formed box: a tar.gz holding metadata.json with the provider.
    box_file = tmp_path / "boxes with space" / "windows-1803-hyperv.box"
    box_file.parent.mkdir()
    data = json.dumps({"provider": "hyperv"}).encode()
    with tarfile.open(box_file, "w:gz") as tar:
        info = tarfile.TarInfo("metadata.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    sha = hashlib.sha256(box_file.read_bytes()).hexdigest()
    profile = profiles.load("windows-1803")
    version = catalogue.box_version(dt.datetime(2024, 5, 1, 7, 8, 9, tzinfo=dt.timezone.utc))
    meta = catalogue.box_catalogue("windows-1803", profile, version, "hyperv", box_file, sha)
    catalogue_file = tmp_path / "windows-1803.json"
    catalogue.write_json(catalogue_file, meta)

    env = {"VAGRANT_HOME": str(tmp_path / "vagrant-home"), "PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    add = subprocess.run([vagrant, "box", "add", str(catalogue_file)], env=env, capture_output=True, text=True, timeout=300)
    assert add.returncode == 0, add.stdout + add.stderr
    assert "Successfully added box 'k4w/windows-1803' (v20240501.070809) for 'hyperv'" in add.stdout
    listing = subprocess.run([vagrant, "box", "list"], env=env, capture_output=True, text=True, timeout=120)
    assert "k4w/windows-1803 (hyperv, 20240501.070809)" in listing.stdout

    # A wrong checksum is caught by Vagrant, so the catalogue's checksum is really checked.
    meta["versions"][0]["providers"][0]["checksum"] = "0" * 64
    meta["versions"][0]["version"] = "20240501.070810"
    catalogue.write_json(catalogue_file, meta)
    bad = subprocess.run([vagrant, "box", "add", str(catalogue_file)], env=env, capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "checksum" in (bad.stdout + bad.stderr).lower()


REAL_BUILD_TEMPLATE = """{
  "builders": [{"type": "null", "name": "hyperv-iso", "communicator": "none"}],
  "provisioners": [
    {"type": "shell-local", "script": "<< paths.guest >>/ubuntu/bake/base.sh"},
    {"type": "shell-local", "inline": ["echo proxy is << proxy.http or 'none' >>"]}
  ],
  "post-processors": [
    {"type": "shell-local", "script": "<< paths.guest >>/ubuntu/bake/make-box.sh",
     "environment_vars": ["K4W_BOX_OUT=<< paths.boxes >>/.partial/<< box.name >>-libvirt.box"]}
  ]
}
"""
MAKE_BOX = """#!/usr/bin/env bash
set -euo pipefail
trap 'echo "make-box.sh: line $LINENO: $BASH_COMMAND failed" >&2' ERR
work=$(mktemp -d)
printf '{"provider": "libvirt"}' > "$work/metadata.json"
mkdir -p "$(dirname "$K4W_BOX_OUT")"
tar czf "$K4W_BOX_OUT" -C "$work" metadata.json
rm -rf "$work"
"""


def test_real_packer_build_through_the_runner_then_vagrant_box_add(repo, console, tmp_path):
    """Real Packer (null builder standing in for Hyper-V) -> runner -> catalogue -> real Vagrant."""
    from k4w.bake import build_box

    from .conftest import PROXY, PROXY_PASSWORD

    _require("packer", "apt-get install -y packer")
    vagrant = _require("vagrant", "apt-get install -y vagrant")
    (repo.root / "templates" / "packer" / "ubuntu.json.j2").write_text(REAL_BUILD_TEMPLATE)
    script = repo.root / "guest" / "ubuntu" / "bake" / "make-box.sh"
    script.write_text(MAKE_BOX)
    script.chmod(0o755)
    (repo.root / "guest" / "ubuntu" / "bake" / "base.sh").chmod(0o755)

    result = build_box(repo.cluster(proxy=PROXY), "ubuntu-1604", repo.out, console=console)
    assert result.status == "built"
    assert "provisioner 2/2: local shell" in console.text
    record = json.loads((repo.out / "boxes" / "ubuntu-1604.record.json").read_text())
    assert record["packer"] == packer_cli.version_str(packer_cli.packer_version())
    assert "guest/ubuntu/bake/make-box.sh" in record["stamp"]["inputs"]
    log = (repo.out / "logs" / "ubuntu-1604.log").read_text()
    assert "proxy is http://***@proxy.corp.example:3128" in log and PROXY_PASSWORD not in log

    env = {"VAGRANT_HOME": str(tmp_path / "vagrant-home"), "PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    add = subprocess.run([vagrant, "box", "add", str(repo.out / "boxes" / "ubuntu-1604.json")], env=env,
                         capture_output=True, text=True, timeout=300)
    assert add.returncode == 0, add.stdout + add.stderr
    assert f"Successfully added box 'k4w/ubuntu-1604' (v{record['version']}) for 'libvirt'" in add.stdout
