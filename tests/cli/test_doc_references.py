"""Every pointer into our own documentation leads somewhere: a `README "Section"` (or `README, "Section"`,
`README.md, Section`, `README.md#anchor`) names a heading README.md has, and a `docs/<page>.md` (with an
optional `"Section"` or `#anchor`) names a page that exists and, when given, a heading on it.

Issue 34 cut the README to its two commands and moved its sections into docs/; the comments, configs and
error messages that still sent a reader to README "Patching" sent them nowhere. mkdocs --strict checks
the links between pages; this checks the references in code, comments, YAML, scripts and templates.
"""
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# `README "Section"`, `README, "Section"`, `README.md "Section"`, `README.md, "Section"` (the quotes may be
# escaped in a Python string, the section may wrap onto a comment line), `README.md, Section` and
# `README.md#anchor`. Not a bare "the README" (a reference to the whole file, which still exists).
README_REF = re.compile(
    r"(?<![\w/.@'\"-])README(?P<md>\.md)?"
    r"(?:#(?P<anchor>[\w-]+)"
    r"|(?:,[ \t]*|[ \t]+)\\?\"(?P<quoted>[^\"\\]{1,120})\\?\""
    r"|(?(md),[ \t]+(?P<bare>[A-Z][\w+-]*(?:[ \t]+[\w+-]+)*)))")
# A project's own README.md at a tag, or another repository's: not ours.
UPSTREAM_BEFORE = re.compile(r"(?:\bits|\btheir|\bupstream|[\w.-]+/[\w.-]+(?:@\w+)?)\s*$", re.IGNORECASE)
UPSTREAM_AFTER = re.compile(r"^[^\n]{0,40}?\bat (?:v?\d|tag\b)")
DOCS_REF = re.compile(
    r"(?<![\w/.-])docs/(?P<page>[\w/.-]+?\.md)"
    r"(?:#(?P<anchor>[\w-]+)|[ \t]+\\?\"(?P<quoted>[^\"\\]{1,120})\\?\")?")
# Other projects' docs/ pages that our comments cite at a pinned tag (no page of ours has these names).
UPSTREAM_DOCS = {
    "hosts.md": "containerd's, at v2.3.7 (hosts.toml)",
    "cri/config.md": "containerd's, at v2.3.7 (the CRI plugin's config)",
    "cri/registry.md": "containerd's, at v2.3.7 (the deprecated registry settings)",
    "man/containerd-config.toml.5.md": "containerd's man page, at v2.3.7",
    "ansible/inventory.md": "kubespray's, at v2.31.0 (the inventory groups)",
}
# Text files whose README mentions are not references to ours, with the reason.
EXCEPTIONS = {
    # The fixture folder's own README.md, next to the files that cite it.
    "tests/fixtures/iso-images/README.md",
    # This file: its docstring and its sample hold stale references on purpose.
    "tests/cli/test_doc_references.py",
}


def tracked_text_files() -> list[Path]:
    names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True).stdout.split(b"\0")
    files = []
    for name in filter(None, names):
        rel = name.decode()
        path = ROOT / rel
        if rel in EXCEPTIONS or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        files.append(path)
    return files


def _plain(text: str) -> str:
    """A heading or a quoted section as words: no markup, no comment leaders where it wrapped."""
    text = re.sub(r"\s*\n\s*(?:#|//|\*|--|<#)?\s*", " ", text)
    return " ".join(re.sub(r"[`*_]", "", text).lower().split())


def _slug(heading: str) -> str:
    # Python-Markdown's toc slugify, which mkdocs uses for the anchors (toc extension default).
    text = re.sub(r"[^\w\s-]", "", re.sub(r"[`*]", "", heading)).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def headings(path: Path) -> list[str]:
    found, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6}\s+(.+?)\s*#*\s*$", line)):
            found.append(m.group(1))
    return found


def names_heading(section: str, page_headings: list[str]) -> bool:
    """The section is a heading, or a heading's first words ("Patching" for "Patching the Windows boxes")."""
    want = _plain(section).rstrip(".")
    return any(h == want or re.match(re.escape(want) + r"(?!\w)", h) for h in map(_plain, page_headings))


def stale_references(files: list[Path]) -> list[str]:
    readme = headings(ROOT / "README.md")
    page_headings: dict[Path, list[str]] = {}
    problems = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name

        def where(m: re.Match) -> str:
            line = text.count("\n", 0, m.start()) + 1
            return f"{rel}:{line}: {text.splitlines()[line - 1].strip()}"

        for m in README_REF.finditer(text):
            section, anchor = m.group("quoted") or m.group("bare"), m.group("anchor")
            if not (section or anchor):
                continue
            line_start = text.rfind("\n", 0, m.start()) + 1
            if UPSTREAM_BEFORE.search(text[line_start:m.start()]) or UPSTREAM_AFTER.match(text[m.end():]):
                continue
            if anchor and anchor not in map(_slug, readme):
                problems.append(f"{where(m)}\n    README.md has no heading with anchor #{anchor}")
            elif section and not names_heading(section, readme):
                problems.append(f"{where(m)}\n    README.md has no heading \"{_plain(section)}\" "
                                f"(its sections moved to docs/: name the page)")
        for m in DOCS_REF.finditer(text):
            if m.group("page") in UPSTREAM_DOCS:
                continue
            page = ROOT / "docs" / m.group("page")
            if not page.is_file():
                problems.append(f"{where(m)}\n    no page docs/{m.group('page')}")
                continue
            found = page_headings.setdefault(page, headings(page))
            if m.group("anchor") and m.group("anchor") not in map(_slug, found):
                problems.append(f"{where(m)}\n    docs/{m.group('page')} has no heading with anchor #{m.group('anchor')}")
            elif m.group("quoted") and not names_heading(m.group("quoted"), found):
                problems.append(f"{where(m)}\n    docs/{m.group('page')} has no heading \"{_plain(m.group('quoted'))}\"")
    return problems


def test_every_reference_to_our_docs_names_an_existing_page_and_heading():
    problems = stale_references(tracked_text_files())
    assert not problems, "references to documentation that is not there:\n" + "\n".join(problems)


def test_the_check_sees_each_form_and_leaves_other_projects_readmes_alone(tmp_path):
    """The forms a reader follows are all caught; an upstream project's README is not ours to check."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        '# pinned (README "Patching")\n'
        'msg = f"see README \\"Registry mirrors\\""\n'
        "# refused (README.md, Boxes)\n"
        '# cache (README, "Downloads")\n'
        "# README.md#registry-mirrors\n"
        '# docs/modern-stack.md "Releases"\n'
        "# docs/no-such-page.md\n"
        '# ok: README "Quick start", docs/modern-stack.md "Patching", docs/verification.md#verification\n'
        "# upstream: ptylenda/kubernetes-for-windows@71843a4 README.md (\"Known issues\"), its README, \"x\"\n"
        '# a tool\'s README.md "Build Tags" at v1.5.2\n', encoding="utf-8")
    problems = stale_references([sample])
    assert [p.split(":")[1] for p in problems] == ["1", "2", "3", "4", "5", "6", "7"], "\n".join(problems)
