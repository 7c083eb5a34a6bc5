"""The README's two commands are what CI runs, the README is short, and every task it or a docs page names exists."""

import re

from tests.helpers import ROOT, invoke


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", text, re.S).group(1)
    return [line.strip() for line in block.splitlines() if line.strip()]


def test_readme_starts_with_two_commands_and_ci_runs_the_second_exactly():
    setup_and_main, test_command = readme_commands()
    assert "invoke all" in setup_and_main
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line.strip() and not line.startswith("#")]
    assert ci[-1] == test_command
    assert "bash scripts/setup.sh" in ci


def test_every_task_the_readme_mentions_exists():
    listed = invoke("--list").stdout
    tasks = set(re.findall(r"^\s{2}(\S+)", listed, re.M))
    mentioned = set(re.findall(r"invoke ([a-z][a-z-]+)", (ROOT / "README.md").read_text()))
    assert mentioned <= tasks, mentioned - tasks


def test_the_readme_is_short_and_starts_with_the_two_commands():
    """A user reads the README in two minutes: its title, then the two commands, first and unchanged
    (CI runs the second); everything else is a page of the docs site (docs/, mkdocs.yml)."""
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines: move sections into docs/ pages"
    assert lines[0].startswith("# ") and lines[1] == ""
    assert lines[2:6] == ["```bash", "bash scripts/setup.sh && .venv/bin/invoke all", ".venv/bin/python -m pytest", "```"]


def test_every_task_the_docs_pages_mention_exists():
    listed = invoke("--list").stdout
    tasks = set(re.findall(r"^\s{2}(\S+)", listed, re.M))
    # `invoke build-*` names a group of tasks, not one.
    mentioned = {(page.relative_to(ROOT).as_posix(), name) for page in sorted((ROOT / "docs").rglob("*.md"))
                 for name in re.findall(r"invoke ([a-z][a-z-]*[a-z])\b(?!-\*)", page.read_text())}
    assert len({name for _, name in mentioned}) >= 10, "the test no longer finds the tasks the pages name"
    assert sorted((page, name) for page, name in mentioned if name not in tasks) == []
