"""The end-to-end bake (test_e2e_bake.py) and its cheap parts' unit tests.

The bake prints its phase-timing table and findings in a terminal-summary section of its
own, so they are in the CI output whether it passed or failed (pytest shows a passing
test's captured output nowhere).
"""

from __future__ import annotations

import os

import pytest

from k4w.infra import sources
from ci.e2e.run import E2E_BOXES, SBIN
from tests.helpers import use_sources

_REPORTS: list[tuple[str, list[str]]] = []


@pytest.fixture
def e2e_report():
    """e2e_report(title, lines): print these lines in the 'k4w e2e' summary section."""

    def add(title: str, lines: list[str]) -> None:
        _REPORTS.append((title, list(lines)))

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


def pytest_collection_modifyitems(session, config, items):
    # The bake takes about a quarter of an hour: run it after everything else, so the fast
    # suite reports first. Order among the others is unchanged.
    items.sort(key=lambda item: item.get_closest_marker("e2e") is not None)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    for title, lines in _REPORTS:
        terminalreporter.section(f"k4w e2e: {title}")
        for line in lines:
            terminalreporter.write_line(line)
