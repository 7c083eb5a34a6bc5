"""The throwaway VM test-box boots: the box it pins from the catalogue and the Vagrantfile it
writes for it (valid Ruby)."""

from __future__ import annotations

import subprocess

import pytest

from k4w.model import profiles
from k4w.infra.errors import K4wError
from k4w.verify import throwaway
from tests.helpers import system_tool


def test_generated_vagrantfile_is_valid_ruby_and_pins_the_new_box(built, tmp_path):
    cluster, out = built
    ruby = system_tool("ruby")
    for box in cluster.config.boxes():
        profile = profiles.load(box)
        ref = throwaway.box_ref(out, profile)
        assert (ref.name, ref.version) == (f"k4w/{box}", "20261121.090000")
        text = throwaway.vagrantfile(ref, profile, "k4w-test-it's", "Default Switch", box_user_secrets=out / "secrets" / "box-user.json")
        path = tmp_path / f"{box}.Vagrantfile"
        path.write_text(text)
        proc = subprocess.run([ruby, "-c", str(path)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        assert "config.vm.box_version = '20261121.090000'" in text
        assert "hv.vmname = 'k4w-test-it\\'s'" in text
        assert ("config.ssh.insert_key = false" in text) is (not profile.is_windows)
        # Windows: the box user's password is read from its private file, never written here
        assert (f"File.read('{out / 'secrets' / 'box-user.json'}')" in text) is profile.is_windows
        assert "winrm.password = '" not in text


def test_box_without_a_catalogue_names_the_build_task(tmp_path):
    with pytest.raises(K4wError, match="invoke build-windows"):
        throwaway.box_ref(tmp_path, profiles.load("windows-1803"))


def test_a_windows_throwaway_vagrantfile_needs_the_password_file(built):
    _, out = built
    profile = profiles.load("windows-1803")
    with pytest.raises(K4wError, match="box-user.json"):
        throwaway.vagrantfile(throwaway.box_ref(out, profile), profile, "vm", "Default Switch")
