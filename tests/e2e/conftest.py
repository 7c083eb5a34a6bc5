"""The end-to-end bake (test_e2e_bake.py) and its cheap parts' unit tests.

The bake prints its phase-timing table and findings in a terminal-summary section of its
own, so they are in the CI output whether it passed or failed (pytest shows a passing
test's captured output nowhere). The lines travel in the test's report (user_properties) and
tests/conftest.py prints them: under xdist only the controller prints a summary, and it loads no
conftest below tests/. tests/conftest.py also orders the bakes.
"""

from __future__ import annotations

import os

import pytest

from k4w.infra import sources
from ci.e2e.run import E2E_BOXES, SBIN
from tests.helpers import use_sources

# tests/conftest.py prints the user_properties of this name.
_PROPERTY = "k4w e2e report"


@pytest.fixture
def e2e_report(request):
    """e2e_report(title, lines): print these lines in the 'k4w e2e' summary section."""

    def add(title: str, lines: list[str]) -> None:
        request.node.user_properties.append((_PROPERTY, (title, list(lines))))

    return add


@pytest.fixture(autouse=True)
def e2e_box_profile(monkeypatch):
    """The CI-only profile lives under tests/, not boxes/: resolve it here and in child processes."""
    monkeypatch.setenv(sources.BOX_DIRS_ENV, str(E2E_BOXES))
    use_sources(monkeypatch, box_folders=(E2E_BOXES,))


@pytest.fixture(autouse=True)
def sbin_on_path(monkeypatch):
    """apt installs squid and debootstrap into sbin folders, which a non-root user's PATH
    lacks: search them too, as the harness does (run.SBIN)."""
    folders = os.environ.get("PATH", "").split(os.pathsep)
    monkeypatch.setenv("PATH", os.pathsep.join(folders + [f for f in SBIN.split(":") if f not in folders]))
