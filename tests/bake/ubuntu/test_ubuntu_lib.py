"""lib.sh helpers that decide whether a step has work to do (the heart of idempotence)."""

import subprocess

import pytest

from .conftest import ROOT

LIB = ROOT / "guest" / "ubuntu" / "lib.sh"


@pytest.mark.parametrize(("status", "expected"), [
    ("ii", "17.03.2~ce-0~ubuntu-xenial"),   # installed
    ("hi", "17.03.2~ce-0~ubuntu-xenial"),   # installed and held: step 03 holds docker
    ("rc", ""),                             # removed, config files left: not installed
    ("un", ""),                             # known but not installed
])
def test_package_version_counts_held_packages_as_installed(tmp_path, status, expected):
    fake = tmp_path / "dpkg-query"
    fake.write_text(f"#!/bin/sh\necho '{status} 17.03.2~ce-0~ubuntu-xenial'\n")
    fake.chmod(0o755)
    script = f'set -euo pipefail; source "{LIB}"; k4w_package_version docker-ce'
    res = subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                         env={"PATH": f"{tmp_path}:/usr/bin:/bin", "K4W_STEP": "test"})
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == expected
