"""The whole suite's plumbing: it runs on every core, shares what is the same for every test, and
says at the end where the time went.

- Both cores (pytest-xdist, the `test` extra): the README's `python -m pytest` runs with
  `-n auto --dist loadfile`, set here and not in pyproject's addopts, because the product's
  testinfra runs (k4w.verify.specrun, `invoke test-box`) start pytest with this repository's
  pyproject too, and must neither need xdist nor run their specs in parallel. `-n 0` or
  `-p no:xdist` on the command line runs in one process, as does a machine without xdist.
- Each test module runs whole on one worker: module fixtures are built once, and a module's
  tests keep their order. The e2e bakes (one module: two QEMU bakes on
  one base image under build/e2e, then the cache check) start first on one worker while the other
  works through the fast tests; run serially they run last, so the fast tests report first.
- shellcheck answers each distinct input once per session (tests/tool_memo.py says why and what
  the answer depends on).
- At the end: the e2e bakes' own sections (tests/e2e/conftest.py), then time per test folder and
  per marker, summed over workers, beside --durations. Both are printed here because under xdist
  only the controller prints a summary, and it loads no conftest below this one.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

_MARKERS = ("e2e", "tools", "infra")
_MARKS_PROPERTY = "k4w marks"
_E2E_PROPERTY = "k4w e2e report"  # tests/e2e/conftest.py's e2e_report fixture
_E2E_REPORTS: list[tuple[str, list[str]]] = []
_STARTED = time.monotonic()
_SECONDS: dict[str, dict[str, list[float]]] = {"folder": defaultdict(lambda: [0, 0.0]), "marker": defaultdict(lambda: [0, 0.0])}


def _worker(config) -> bool:
    return hasattr(config, "workerinput")


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """Turn on both cores for the default run (see the module docstring for why not addopts)."""
    if _worker(config) or not config.pluginmanager.hasplugin("xdist") or config.getoption("collectonly"):
        return None
    if config.getoption("numprocesses", None) is None and config.getoption("dist", "no") == "no":
        config.option.numprocesses = "auto"
        # Whole modules per worker: module fixtures are built once, a module's tests keep their
        # order, and the bakes (one module) share their base image. Not loadgroup: xdist 3.8 marks
        # its groups in Item._nodeid, which pytest 9 no longer reads (Node.nodeid is str(_id)).
        config.option.dist = "loadfile"
        # Keep the collection order (e2e first): xdist would otherwise start with the groups that
        # have the most tests, and the bakes would start last.
        config.option.loadscopereorder = False
    return None


def pytest_collection_modifyitems(session, config, items):
    # A worker's collection order is the order in which the controller hands out the modules.
    distributed = _worker(config)
    items.sort(key=lambda item: (item.get_closest_marker("e2e") is None) == distributed)
    for item in items:  # the report's keywords also hold folder names (tests/e2e): say which are marks
        item.user_properties.append((_MARKS_PROPERTY, [name for name in _MARKERS if item.get_closest_marker(name)]))


def _shared_folder(tmp_path_factory) -> Path:
    """A folder every worker of this session shares (the workers' base folders sit in it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def _cache_files(folder: Path) -> dict[str, int]:
    """Each file of k4w's component and image cache at folder with its mtime; the pinned tools built into
    tools/ by scripts/build-tools are not part of it."""
    if not folder.is_dir():
        return {}
    return {p.relative_to(folder).as_posix(): p.stat().st_mtime_ns for p in folder.rglob("*")
            if p.is_file() and p.relative_to(folder).parts[0] != "tools"}


@pytest.fixture(scope="session", autouse=True)
def cache_outside_home(tmp_path_factory):
    """No test reaches this user's own component and image cache (~/.cache/k4w): the per-user folder k4w
    falls back to (XDG_CACHE_HOME, LOCALAPPDATA on Windows) is a session folder for this process and every
    program it starts (a CLI test that pinned without --cache once wrote 127.0.0.1 URLs into the real one),
    and the session fails if the real cache changed anyway. --cache, K4W_CACHE and downloads.cache still
    win, as they do for users. The pinned tools and Go's build cache stay where they are (they are read,
    and a cold Go build cache costs minutes)."""
    from k4w.bake import cache
    from k4w.infra import pinned_tools

    real = cache.default_dir()
    before = _cache_files(real)
    home = tmp_path_factory.mktemp("user-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("K4W_TOOLS_DIR", str(pinned_tools.root()))
        patch.setenv("GOCACHE", os.environ.get("GOCACHE") or str(real.parent / "go-build"))
        patch.setenv("XDG_CACHE_HOME", str(home))
        patch.setenv("LOCALAPPDATA", str(home))
        yield
    changed = sorted(set(before.items()) ^ set(_cache_files(real).items()))
    assert not changed, f"tests changed this user's cache {real}: " + ", ".join(sorted({name for name, _ in changed}))


@pytest.fixture(scope="session", autouse=True)
def shellcheck_memo(tmp_path_factory):
    """`shellcheck` first on PATH, for this process and every program it starts: tests/tool_memo.py."""
    from k4w.infra import tools

    real = tools.find("shellcheck")
    if real is None:  # tests name the install command themselves (tests.helpers.system_tool)
        yield None
        return
    memo = _shared_folder(tmp_path_factory) / "shellcheck-memo"
    memo.mkdir(exist_ok=True)
    launcher_dir = tmp_path_factory.mktemp("shellcheck-launcher")
    launcher = launcher_dir / "shellcheck"
    memo_script = Path(__file__).with_name("tool_memo.py")
    launcher.write_text("#!/bin/sh\nexec " + " ".join(shlex.quote(str(a)) for a in (sys.executable, memo_script, real, memo))
                        + ' "$@"\n')
    launcher.chmod(0o755)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PATH", f"{launcher_dir}{os.pathsep}{os.environ.get('PATH', '')}")
        yield memo


def pytest_runtest_logreport(report):
    """Every phase's time goes to the test's folder and its markers; a test counts once, at teardown."""
    folder = os.path.dirname(report.location[0]) or "."
    markers = next((marks for name, marks in report.user_properties if name == _MARKS_PROPERTY), None) or ["(none)"]
    for kind, names in (("folder", [folder]), ("marker", markers)):
        for name in names:
            entry = _SECONDS[kind][name]
            entry[1] += report.duration
            entry[0] += report.when == "teardown"
    if report.when == "teardown":
        _E2E_REPORTS.extend(value for name, value in report.user_properties if name == _E2E_PROPERTY)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if _worker(config):
        return
    for title, lines in _E2E_REPORTS:
        terminalreporter.section(f"k4w e2e: {title}")
        for line in lines:
            terminalreporter.write_line(line)
    if not _SECONDS["folder"]:
        return
    wall = time.monotonic() - _STARTED
    workers = getattr(config.option, "numprocesses", None) or 1
    total = sum(seconds for _, seconds in _SECONDS["folder"].values())
    write = terminalreporter.write_line
    terminalreporter.section("k4w: where the time went")
    write(f"wall {wall:.0f} s with {workers} worker(s); test time {total:.0f} s (setup + call + teardown, summed over workers)")
    for kind in ("folder", "marker"):
        write(f"  {kind:<28} {'tests':>6} {'seconds':>9} {'share':>6}")
        for name, (count, seconds) in sorted(_SECONDS[kind].items(), key=lambda kv: -kv[1][1]):
            write(f"  {name:<28} {count:>6} {seconds:>9.1f} {seconds / total:>6.0%}" if total else f"  {name}")
    log = _memo_log(config)
    if log is not None:
        words = log.read_text().split()
        write(f"shellcheck: {len(words)} runs, {words.count('memo')} answered from this session's memo, "
              f"{words.count('real')} by the real shellcheck")


def _memo_log(config) -> Path | None:
    factory = getattr(config, "_tmp_path_factory", None)
    if factory is None:
        return None
    try:
        log = factory.getbasetemp() / "shellcheck-memo" / "runs.log"
    except OSError:
        return None
    return log if log.is_file() else None
