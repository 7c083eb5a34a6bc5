"""Boot tasks of the Windows guest scripts (scheduled tasks with an -AtStartup trigger), read with the
tree-sitter PowerShell grammar.

A task registered with default settings does not start while the machine runs on battery and is
stopped when it goes on battery (New-ScheduledTaskSettingsSet: DisallowStartIfOnBatteries and
StopIfGoingOnBatteries are the defaults), and a Hyper-V VM on a laptop may see the host's battery:
the node would not start, or WinRM would stay closed to Vagrant. Nor is it started again when its
action fails to start. So every boot task, in every script, passes settings that allow battery and
restart on failure. And the WinRM boot work is one task whose actions run in order: winrm-cert.ps1
removes and recreates the HTTPS listener that winrm-scope.ps1 reads."""

from __future__ import annotations

import re

import pytest

from k4w.infra.sources import REPO_ROOT as ROOT
from k4w.validate.powershell_rules import parse

from k4w.validate.ps51_rules import _walk   # the rules' own pre-order walk of the syntax tree

GUEST = ROOT / "guest" / "windows"
BOOTSTRAP = GUEST / "setup" / "k4w-bootstrap.ps1"
# The switches and parameters every boot task's New-ScheduledTaskSettingsSet must pass.
REQUIRED_SETTINGS = ("-allowstartifonbatteries", "-dontstopifgoingonbatteries", "-restartcount", "-restartinterval")


def _name(command) -> str:
    return next((c.text.decode().lower() for c in command.children if c.type == "command_name"), "")


def _arguments(command) -> dict[str, str]:
    """Each named parameter (lower case) with the text of the element after it ('' for a switch)."""
    elements = [e for c in command.children if c.type == "command_elements"
                for e in c.children if e.type != "command_argument_sep"]
    found = {}
    for i, element in enumerate(elements):
        if element.type == "command_parameter":
            following = elements[i + 1] if i + 1 < len(elements) else None
            value = following.text.decode() if following is not None and following.type != "command_parameter" else ""
            found[element.text.decode().lower().rstrip(":")] = value
    return found


def _assignments(root) -> dict[str, str]:
    """$name (lower case) -> the text assigned to it (the last assignment in the script wins)."""
    found = {}
    for node in _walk(root):
        if node.type == "assignment_expression" and len(node.children) >= 3:
            found[node.children[0].text.decode().strip().lower()] = node.children[-1].text.decode()
    return found


def _resolved(text: str, assignments: dict[str, str]) -> str:
    """text with a bare $variable replaced by what the script assigns to it."""
    seen = set()
    while re.fullmatch(r"\$\w+", text.strip()) and text.strip().lower() in assignments and text.strip().lower() not in seen:
        seen.add(text.strip().lower())
        text = assignments[text.strip().lower()]
    return text


def boot_tasks(source: bytes) -> list[tuple[int, dict[str, str]]]:
    """Every task definition with an -AtStartup trigger: (line, its parameters with values resolved).
    A definition is a Register-ScheduledTask with -Trigger, or the New-ScheduledTask its -InputObject names."""
    root = parse(source).root_node
    assignments = _assignments(root)
    tasks = []
    for node in _walk(root):
        if node.type != "command" or _name(node) not in ("register-scheduledtask", "new-scheduledtask"):
            continue
        args = {k: _resolved(v, assignments) for k, v in _arguments(node).items()}
        if "-trigger" in args and re.search(r"-AtStartup\b", args["-trigger"], re.I):
            tasks.append((node.start_point[0] + 1, args))
    return tasks


def boot_task_problems(source: bytes) -> list[str]:
    problems = []
    for line, args in boot_tasks(source):
        settings = args.get("-settings", "")
        if "New-ScheduledTaskSettingsSet" not in settings:
            problems.append(f"line {line}: a boot task registered with default settings (no battery start, no restart)")
            continue
        missing = [p for p in REQUIRED_SETTINGS if not re.search(re.escape(p) + r"\b", settings, re.I)]
        if missing:
            problems.append(f"line {line}: a boot task's settings lack {', '.join(missing)}")
    return problems


def _scripts():
    return sorted(GUEST.rglob("*.ps1"))


def test_every_boot_task_starts_on_battery_and_restarts_on_failure():
    found = {script.relative_to(GUEST).as_posix(): boot_tasks(script.read_bytes()) for script in _scripts()}
    # Both boot tasks are found: the node's start task and the WinRM one.
    assert {name for name, tasks in found.items() if tasks} == {"bake/08-node-services.ps1", "setup/k4w-bootstrap.ps1"}
    problems = {script.relative_to(GUEST).as_posix(): boot_task_problems(script.read_bytes()) for script in _scripts()}
    assert {k: v for k, v in problems.items() if v} == {}


def test_the_winrm_boot_task_runs_cert_then_scope_in_one_task():
    [(_, args)] = boot_tasks(BOOTSTRAP.read_bytes())
    assert args["-taskname"] == "'k4w-winrm-scope'"
    # One task, its actions in this order (Task Scheduler runs a task's actions one after the other).
    assert re.search(r"foreach \(\$taskScript in @\(\$certScript, \$scope\)\)", args["-action"]), args["-action"]
    assert "New-ScheduledTaskAction" in args["-action"]
    assert "-UserId 'SYSTEM'" in args["-principal"]


@pytest.mark.parametrize("script, old, new, expected", [
    # The bootstrap's WinRM task without any settings: defaults, no battery, no restart.
    (BOOTSTRAP, "-Principal $principal -Settings $settings `", "-Principal $principal `", "registered with default settings"),
    # Settings without the battery switches.
    (BOOTSTRAP, "-AllowStartIfOnBatteries -DontStopIfGoingOnBatteries `", "`", "lack -allowstartifonbatteries, -dontstopifgoingonbatteries"),
    # Settings without restart on failure.
    (BOOTSTRAP, "-RestartCount 3 -RestartInterval (New-TimeSpan -Minutes 1)", "-MultipleInstances IgnoreNew",
     "lack -restartcount, -restartinterval"),
    # The node's start task (New-ScheduledTask + Register -InputObject) without the battery switches.
    (GUEST / "bake" / "08-node-services.ps1", "-AllowStartIfOnBatteries -DontStopIfGoingOnBatteries ", "",
     "lack -allowstartifonbatteries, -dontstopifgoingonbatteries"),
])
def test_the_boot_task_check_catches(script, old, new, expected):
    text = script.read_text(encoding="utf-8-sig")
    assert old in text
    problems = boot_task_problems(text.replace(old, new, 1).encode())
    assert any(expected in p for p in problems), problems
