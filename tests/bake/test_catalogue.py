"""The box catalogue and build record (catalogue.py) as the real Vagrant reads them:
`vagrant box add` accepts the catalogue, and checks its checksum."""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import os
import subprocess
import tarfile

import pytest

from k4w.model import profiles
from k4w.bake import catalogue
from tests.helpers import system_tool


@pytest.mark.tools
def test_vagrant_box_add_accepts_the_catalogue(repo, tmp_path):
    vagrant = system_tool("vagrant")
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
