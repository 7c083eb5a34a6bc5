"""The default `pytest` run collects every test module under tests/ and nothing else.

pytest's defaults once hid tests/build (norecursedirs skips folders named build, dist, venv,
...): 64 tests never ran and nothing said so. This runs the collection a user's plain
`python -m pytest` does and compares it with the test files on disk, so no default, ini option
or conftest can hide a folder again; and the live specs, which need a real host, stay out.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers import ROOT



@pytest.fixture(scope="module")
def default_collection() -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}  # the defaults, not this run's
    return subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-p", "no:hypothesispytest"],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False,
    )


def collected_modules(output: str) -> set[str]:
    """The files of the test ids `--collect-only -q` prints (path::name[params])."""
    return {line.split("::", 1)[0] for line in output.splitlines() if "::" in line}


def modules_on_disk() -> set[str]:
    """tests/**/test_*.py, except in tests/fakes (stand-ins for external programs) and in
    fixtures folders (data the tests read)."""
    found = set()
    for path in (ROOT / "tests").rglob("test_*.py"):
        relative = path.relative_to(ROOT)
        if relative.parts[:2] != ("tests", "fakes") and "fixtures" not in relative.parts:
            found.add(relative.as_posix())
    return found


def test_every_test_module_is_collected_and_nothing_else(default_collection):
    assert default_collection.returncode == 0, default_collection.stdout[-3000:] + default_collection.stderr
    collected = collected_modules(default_collection.stdout)
    on_disk = modules_on_disk()
    assert on_disk, "no test modules found under tests/"
    assert collected == on_disk, (
        f"on disk but not collected: {sorted(on_disk - collected)}\n"
        f"collected but not a tests/**/test_*.py file: {sorted(collected - on_disk)}"
    )


def test_default_pytest_run_does_not_collect_the_live_specs(default_collection):
    assert "tests/verify/" in default_collection.stdout, default_collection.stdout[-2000:]
    assert "k4w/verify/specs/" not in default_collection.stdout
