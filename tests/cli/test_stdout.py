"""What k4w prints on the terminal: a broken stdout is named as such."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.helpers import ROOT


def test_a_full_stdout_is_blamed_on_stdout_not_on_out(tmp_path):
    out = tmp_path / "out"
    with open("/dev/full", "w") as full:
        result = subprocess.run([sys.executable, "-m", "invoke", "plan", "--dry-run", "--out", str(out)], cwd=ROOT,
                                stdout=full, stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "200"},
                                timeout=300)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines == ["error: cannot write to stdout: No space left on device (stdout is redirected to a full disk or "
                     "device, or to a pipe that was closed)"], result.stderr
    assert "--out" not in result.stderr and str(out) not in result.stderr
