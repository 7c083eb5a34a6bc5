"""The docs are a site that builds: `mkdocs build --strict` fails on a broken link, anchor or nav entry,
and every file the README and the pages name is in the repository."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT

PAGES = sorted((ROOT / "docs").rglob("*.md"))
DOCS = [ROOT / "README.md", *PAGES]


def mkdocs_build(project: Path, site: Path) -> subprocess.CompletedProcess:
    # mkdocs is in the `test` extra (pyproject.toml), which scripts/setup.sh installs; no skip without it.
    assert importlib.util.find_spec("mkdocs") and importlib.util.find_spec("material"), \
        "mkdocs and mkdocs-material are missing: run `.venv/bin/pip install -e '.[test]'` (scripts/setup.sh does)"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          cwd=project, env=env, capture_output=True, text=True, timeout=300)


def test_the_site_builds_with_strict_checks(tmp_path):
    result = mkdocs_build(ROOT, tmp_path / "site")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "index.html").is_file()
    for page in PAGES:
        built = page.relative_to(ROOT / "docs").with_suffix("")
        target = tmp_path / "site" / ("index.html" if built.name == "index" else built / "index.html")
        assert target.is_file(), f"{page.relative_to(ROOT)} was not built"


def copy_of_the_site(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    shutil.copytree(ROOT / "docs", project / "docs")
    shutil.copy(ROOT / "mkdocs.yml", project / "mkdocs.yml")
    return project


def _append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + text)


# Each defect the strict build must refuse, and the word of mkdocs' message that names it.
PLANTS = {
    "a link to a page that does not exist": (
        lambda p: _append(p / "docs" / "quick-start.md", "\nSee [the lost page](no-such-page.md).\n"), "no-such-page.md"),
    "a link to an anchor the page lacks": (
        lambda p: _append(p / "docs" / "quick-start.md", "\nSee [doctor](hyperv-host.md#no-such-section).\n"),
        "no-such-section"),
    "a page the navigation leaves out": (
        lambda p: (p / "docs" / "orphan.md").write_text("# Orphan\n"), "orphan.md"),
    "a navigation entry for a missing page": (
        lambda p: (p / "docs" / "troubleshooting.md").unlink(), "troubleshooting.md"),
}


@pytest.mark.parametrize("plant", PLANTS, ids=list(PLANTS))
def test_a_broken_link_or_nav_entry_fails_the_build(tmp_path, plant):
    project = copy_of_the_site(tmp_path)
    defect, named = PLANTS[plant]
    defect(project)
    result = mkdocs_build(project, tmp_path / "site")
    assert result.returncode != 0, f"{plant}: the strict build passed\n" + result.stdout + result.stderr
    assert named in result.stdout + result.stderr


def test_every_relative_link_of_the_readme_names_a_file_of_the_repository():
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", (ROOT / "README.md").read_text())
    local = [link for link in links if not re.match(r"[a-z]+:", link)]
    assert local, "the README links to no page"
    assert [link for link in local if not (ROOT / link).is_file()] == []


# Folders of this repository whose files the docs name in `code`. templates/, guest/, k4w/ and boxes/
# are checked in every tracked file by tests/validate/test_repository_paths.py.
REPO_FOLDERS = ("tests/", "host/", "scripts/", "examples/", "tools/", "vagrant/", "docs/", "iso/", ".ci/")
# Paths in `code` that start like a repository folder but are not files of it, each with why.
NOT_REPOSITORY_FILES = {
    "vagrant/cluster.json": "a rendered file: architecture.md's table of OUT/ (--out) paths",
    "docs/ansible/inventory.md": "kubespray's own file at v2.31.0, cited in existing-cluster.md",
    "examples/k4w-pins.yml": "written by `invoke pin --config examples/...` on the user's host",
}


def named_paths(text: str) -> list[str]:
    """Each `path` in code that starts with a repository folder and is a literal path (no
    placeholder, wildcard or variable), without a trailing `:line` or punctuation."""
    found = []
    for code in re.findall(r"`([^`\s]+)`", text):
        if code.startswith(REPO_FOLDERS) and not re.search(r"[<>*{}$]|\.\.\.", code):
            found.append(code.split(":")[0].rstrip(",."))
    return found


def test_the_docs_name_only_files_of_the_repository():
    """A page that names a moved or deleted file sends its reader nowhere."""
    missing = [f"{doc.relative_to(ROOT)}: {path}" for doc in DOCS for path in named_paths(doc.read_text())
               if path not in NOT_REPOSITORY_FILES and not (ROOT / path).exists()]
    assert missing == []


def test_the_path_check_finds_a_file_that_is_not_there():
    assert named_paths("see `scripts/no-such-tool` and `tests/<stage>/`, `tests/e2e/harness/guest.py:12`.") == [
        "scripts/no-such-tool", "tests/e2e/harness/guest.py"]
    assert not (ROOT / "scripts/no-such-tool").exists()
