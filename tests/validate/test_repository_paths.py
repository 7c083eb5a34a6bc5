"""Every path of this repository that a comment or a doc names exists: a file renamed or moved
(templates/packer/*.json.j2 became *.pkr.hcl.j2) leaves no comment pointing at its old name.

Scanned: paths under templates/, guest/, k4w/ and boxes/ in every tracked *.py, *.sh, *.ps1, *.j2,
*.yml and *.md (in tests/, only the comments of *.py: their strings are fixtures that name made-up
files on purpose). A path with a placeholder (<box>, {name}, *) must match at least one file.
Not paths of this repository, and so skipped: a path cited in another repository (`owner/repo@tag
path`, the project's form for upstream facts), a Vagrant box name (`k4w/<box profile>`), and the
literal head of an f-string (`k4w/{machine...`)."""

from __future__ import annotations

import re
import subprocess

from tests.helpers import ROOT

EXTENSIONS = (".py", ".sh", ".ps1", ".j2", ".yml", ".md")
PATH = re.compile(r"(?<![\w./\\-])((?:templates|guest|k4w|boxes)/[\w.*<>{}/-]*[\w*>}])")
UPSTREAM = re.compile(r"[\w.-]+/[\w.-]+@[\w.+-]+\s+$")   # owner/repo@tag before the path
BOX_NAMES = {p.stem for p in (ROOT / "boxes").glob("*.yml")}


def _scanned() -> dict[str, str]:
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    texts = {}
    for rel in filter(None, tracked.split("\0")):
        if not rel.endswith(EXTENSIONS) or not (ROOT / rel).is_file():
            continue
        text = (ROOT / rel).read_text(encoding="utf-8", errors="replace")
        if rel.startswith("tests/") and rel.endswith(".py"):
            text = "\n".join(line.split("#", 1)[1] if "#" in line else "" for line in text.splitlines())
        texts[rel] = text
    return texts


def _exists(path: str) -> bool:
    pattern = re.sub(r"\*+", "*", re.sub(r"<[^>]*>|\{[^}]*\}", "*", path))
    if "*" in pattern:
        return any(ROOT.glob(pattern))
    return (ROOT / pattern).exists()


def missing_paths(texts: dict[str, str]) -> list[str]:
    missing = []
    for rel, text in texts.items():
        for m in PATH.finditer(text):
            path = m.group(1)
            if UPSTREAM.search(text[max(0, m.start() - 80):m.start()]):
                continue
            if path.count("{") != path.count("}") or path.count("<") != path.count(">"):
                continue   # the literal head of an f-string or a template expression
            if path.startswith("k4w/") and path.removeprefix("k4w/") in BOX_NAMES:
                continue   # a Vagrant box name, k4w/<box>
            if not _exists(path):
                line = text.count("\n", 0, m.start()) + 1
                missing.append(f"{rel}:{line}: {path}")
    return missing


def test_every_repository_path_named_in_a_comment_or_doc_exists():
    missing = missing_paths(_scanned())
    assert not missing, f"{len(missing)} named path(s) do not exist:\n" + "\n".join(missing)


def test_the_scan_finds_a_stale_path():
    """The scan itself: an old template name is caught, a cited upstream path and a box name are not."""
    stale = "templates/packer/windows" + ".json.j2"   # split, so that this file's own scan does not read it
    texts = {"k4w/x.py": f"# see {stale}\n# hashicorp/vagrant@v2.3.4 templates/locales/en.yml\n"
                         "# vagrant init k4w/windows-1803\n# templates/packer/<box>.pkr.hcl.j2\n"}
    assert missing_paths(texts) == [f"k4w/x.py:1: {stale}"]
