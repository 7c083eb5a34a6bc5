"""Parsing Packer's machine-readable output: phase, provisioner N of M, errors (recorded
transcripts, and the real packer's own output)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from k4w.infra import packer_hcl
from k4w.infra import packer_cli
from k4w.bake.transcript import BuildState, parse_line, plan_steps, unescape
from tests.fakes.packer import TRANSCRIPTS as RECORDED
from tests.helpers import system_tool

FIXTURES = Path(__file__).parent / "fixtures"
REAL = FIXTURES / "packer-1.6.6"

WINDOWS_TEMPLATE = {
    "provisioners": [
        {"type": "powershell", "scripts": ["/o/packer/guest/windows/bake/base.ps1"]},
        {"type": "windows-restart"},
        {"type": "file", "source": "/o/packer/guest/windows/node/", "destination": "C:/k/"},
        {"type": "powershell", "scripts": ["/o/packer/guest/windows/bake/docker.ps1"]},
    ]
}


def replay(template: dict, transcript: str, root: str = "/r", box: str = "windows-1803") -> tuple[BuildState, list]:
    state = BuildState.for_template(template)
    events = []
    for line in transcript.splitlines():
        line = line.replace("{{ROOT}}", root).replace("{{OUT}}", "/o").replace("{{BOX}}", box)
        events.extend(state.feed(line))
    return state, events


def test_unescape_restores_commas_and_newlines():
    line = parse_line("1795289982,,ui,message,    hyperv-iso: step one%!(PACKER_COMMA) with a comma")
    assert line.type == "ui" and line.data[0] == "message"
    assert line.text == "    hyperv-iso: step one, with a comma"
    assert unescape(r"\n==> Wait completed") == "\n==> Wait completed"


def test_non_machine_lines_are_kept_as_plain_text():
    state = BuildState()
    assert parse_line("Error: Failed to initialize build 'hyperv-iso'") is None
    state.feed("Error: Failed to initialize build 'hyperv-iso'")
    assert state.last_error == "Error: Failed to initialize build 'hyperv-iso'"


def test_real_packer_166_success_counts_every_provisioner():
    template = json.loads((REAL / "ok.template.json").read_text())
    state, events = replay(template, (REAL / "ok.transcript").read_text())
    steps = [e.text for e in events if e.kind == "step"]
    assert steps == ["provisioner 1/3: local shell", "provisioner 2/3: local shell", "provisioner 3/3: local shell"]
    assert state.error_count == 0 and not state.build_errors and not state.interrupted
    # stderr of a step that succeeded arrives as ui,error but is not a build error
    assert state.errors == ["third"]


def test_real_packer_166_failure_names_step_and_error():
    template = json.loads((REAL / "fail.template.json").read_text())
    state, _ = replay(template, (REAL / "fail.transcript").read_text())
    assert state.error_count == 1
    assert state.where == "provisioner 3/3 (local shell)"
    assert state.last_error == "Script exited with non-zero exit status: 3.Allowed exit codes are: [0]"


def test_real_packer_166_interrupt_is_recognised():
    template = json.loads((REAL / "interrupted.template.json").read_text())
    state, _ = replay(template, (REAL / "interrupted.transcript").read_text())
    assert state.interrupted and state.where == "provisioner 2/2 (local shell)"


def test_windows_build_phases_and_steps_in_order():
    state, events = replay(WINDOWS_TEMPLATE, (RECORDED / "windows-success.txt").read_text())
    steps = [e.text for e in events if e.kind == "step"]
    assert steps == [
        "provisioner 1/4: base.ps1",
        "provisioner 2/4: restart",  # windows-restart counts as a step
        "provisioner 3/4: upload node",
        "provisioner 4/4: docker.ps1",
    ]
    phases = [e.text for e in events if e.kind == "phase"]
    assert phases.index("Creating virtual machine...") < phases.index("Waiting for WinRM to become available...")
    assert "post-processor vagrant: Creating Vagrant box for 'hyperv' provider" in phases
    assert state.step == 4 and state.total_steps == 4 and state.error_count == 0


def test_failing_provisioner_is_reported_not_the_cleanup_after_it():
    state, _ = replay(WINDOWS_TEMPLATE, (RECORDED / "windows-provisioner-failure.txt").read_text())
    assert state.where == "provisioner 4/4 (docker.ps1)"
    assert state.last_error == "Script exited with non-zero exit status: 1.Allowed exit codes are: [0]"
    assert "Invoke-WebRequest : Unable to connect to the remote server" in state.errors
    assert state.error_count == 1


def test_builder_failure_names_the_builder_phase():
    template = {"provisioners": [{"type": "shell", "scripts": ["/r/guest/ubuntu/bake/base.sh"]}]}
    state, _ = replay(template, (RECORDED / "ubuntu-ssh-timeout.txt").read_text(), box="ubuntu-1604")
    assert state.step == 0
    assert state.where == "'Waiting for SSH to become available...'"
    assert state.last_error == "Timeout waiting for SSH."


def test_inline_and_multi_script_provisioners_count_once_each():
    template = {
        "provisioners": [
            {"type": "shell", "scripts": ["/a.sh", "/b.sh"]},
            {"type": "shell", "inline": ["echo hi"]},
            {"type": "shell", "script": "/c.sh"},
        ]
    }
    total, markers = plan_steps(template)
    assert total == 3
    state = BuildState.for_template(template)
    said = ["/a.sh", "/b.sh", "/tmp/packer-shell123", "/c.sh"]
    seen = []
    for path in said:
        for event in state.feed(f"1,,ui,say,==> hyperv-iso: Provisioning with shell script: {path}"):
            seen.append(event.text)
    assert seen == ["provisioner 1/3: a.sh", "provisioner 1/3: b.sh", "provisioner 2/3: inline shell", "provisioner 3/3: c.sh"]


# HCL2, as k4w renders: the build is named <source type>.<source name> in Packer 1.9.4's output.
REAL_TEMPLATE = """
variable "pw" {
  type      = string
  default   = env("K4W_ADMIN_PASSWORD")
  sensitive = true
}

source "null" "hyperv-iso" {
  communicator = "none"
}

build {
  sources = ["source.null.hyperv-iso"]
  provisioner "shell-local" {
    inline = ["echo one, with a comma"]
  }
  provisioner "shell-local" {
    inline = ["echo two"]
  }
  provisioner "shell-local" {
    inline = ["echo broken >&2; exit 7"]
  }
}
"""


@pytest.mark.tools
def test_real_packer_transcript_parses(tmp_path):
    packer = system_tool("packer")
    path = tmp_path / "t.pkr.hcl"
    path.write_text(REAL_TEMPLATE)
    template = packer_hcl.load(path)
    env = packer_cli.build_env(tmp_path, {"K4W_ADMIN_PASSWORD": "not-a-real-secret"})
    cmd = packer_cli.build_command(path, packer)
    run = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 1
    state = BuildState.for_template(template)
    steps = [e.text for line in run.stdout.splitlines() for e in state.feed(line) if e.kind == "step"]
    assert steps == [f"provisioner {n}/3: local shell" for n in (1, 2, 3)]
    assert state.where == "provisioner 3/3 (local shell)"
    assert state.last_error == "Script exited with non-zero exit status: 7. Allowed exit codes are: [0]"
    assert state.error_count == 1
    # Packer wrote the comma as %!(PACKER_COMMA); the parser gives it back.
    assert "%!(PACKER_COMMA)" in run.stdout
    texts = [parse_line(line).text for line in run.stdout.splitlines() if parse_line(line)]
    assert "    null.hyperv-iso: one, with a comma" in texts
