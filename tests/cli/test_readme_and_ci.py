"""The README's two commands are what CI runs, and every task it names exists."""

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
