"""A stand-in for the `packer` executable (HashiCorp Packer 1.6.x CLI), at the process boundary only.

Tests put it first on PATH with PackerOnPath. It logs every invocation
(argv, cwd and the environment facts the runner controls) as one JSON line to
$FAKE_PACKER_CALLS, and:
  packer -machine-readable version   prints $FAKE_PACKER_VERSION (default 1.6.6)
  packer plugins installed           prints $FAKE_PACKER_PLUGINS (one path per line)
  packer build ... TEMPLATE          replays the scenario for box = TEMPLATE's stem from
                                     the JSON file $FAKE_PACKER_SCENARIOS:
      {"<box>": {"transcript": "windows-success.txt", "exit": 0,
                 "write_box": true, "line_delay": 0.0}}
    write_box creates the box where the template's vagrant post-processor says
    (a real tar.gz holding metadata.json), also on failure, like an interrupted write.
    wait_for_interrupt stops before the transcript's "Cancelling build" line until SIGINT
    arrives (as the runner forwards Ctrl-C), then prints the rest.
The transcripts are in packer_transcripts/ (its README says where their format comes from).
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import stat
import sys
import tarfile
import time
from pathlib import Path

TRANSCRIPTS = Path(__file__).parent / "packer_transcripts"


def log_call(argv: list[str]) -> None:
    calls = os.environ.get("FAKE_PACKER_CALLS")
    if not calls:
        return
    record = {
        "argv": argv,
        "cwd": os.getcwd(),
        "admin_password": os.environ.get("K4W_ADMIN_PASSWORD"),
        "packer_log_set": "PACKER_LOG" in os.environ,
        "checkpoint_disable": os.environ.get("CHECKPOINT_DISABLE"),
        "packer_cache_dir": os.environ.get("PACKER_CACHE_DIR"),
    }
    with open(calls, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")


def template_env(template: dict, name: str) -> str:
    for prov in template.get("provisioners", []):
        for entry in prov.get("environment_vars", []):
            key, _, value = entry.partition("=")
            if key == name:
                return value
    return ""


def substitute(line: str, template: dict, box: str) -> str:
    line = line.replace("{{ROOT}}", os.environ.get("FAKE_PACKER_ROOT", "")).replace("{{OUT}}", os.getcwd()).replace("{{BOX}}", box)
    line = re.sub(r"\{\{ENV:(\w+)\}\}", lambda m: os.environ.get(m.group(1), ""), line)
    return re.sub(r"\{\{TEMPLATE_ENV:(\w+)\}\}", lambda m: template_env(template, m.group(1)), line)


def write_box(template: dict) -> None:
    for pp in template.get("post-processors", []):
        if isinstance(pp, dict) and pp.get("type") == "vagrant":
            provider = "hyperv"
            target = Path(pp["output"].replace("{{.Provider}}", provider))
            target.parent.mkdir(parents=True, exist_ok=True)
            data = json.dumps({"provider": provider}).encode()
            with tarfile.open(target, "w:gz") as tar:
                info = tarfile.TarInfo("metadata.json")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            return
    sys.exit("fake packer: the template has no vagrant post-processor")


def build(argv: list[str]) -> int:
    template_path = Path(argv[-1])
    template = json.loads(template_path.read_text(encoding="utf-8"))
    box = template_path.stem
    scenarios = json.loads(Path(os.environ["FAKE_PACKER_SCENARIOS"]).read_text(encoding="utf-8"))
    scenario = scenarios[box]
    delay = float(scenario.get("line_delay", 0))
    interrupted = []
    if scenario.get("wait_for_interrupt"):
        signal.signal(signal.SIGINT, lambda *_: interrupted.append(True))
    for line in (TRANSCRIPTS / scenario["transcript"]).read_text(encoding="utf-8").splitlines():
        if scenario.get("wait_for_interrupt") and "Cancelling build after receiving" in line:
            deadline = time.monotonic() + 30
            while not interrupted and time.monotonic() < deadline:
                time.sleep(0.05)
            if not interrupted:
                print("fake packer: no interrupt arrived within 30 s", file=sys.stderr)
                return 2
        print(substitute(line, template, box), flush=True)
        if delay:
            time.sleep(delay)
    if scenario.get("write_box"):
        write_box(template)
    return int(scenario.get("exit", 0))


def main(argv: list[str]) -> int:
    log_call(argv)
    if "version" in argv:
        version = os.environ.get("FAKE_PACKER_VERSION", "1.6.6")
        print(f"1714550400,,version,{version}\n1714550400,,version-prelease,\n1714550400,,ui,say,Packer v{version}")
        return 0
    if argv[:2] == ["plugins", "installed"]:
        print(os.environ.get("FAKE_PACKER_PLUGINS", ""))
        return 0
    if argv and argv[0] == "build":
        return build(argv)
    print(f"fake packer: unsupported arguments {argv}", file=sys.stderr)
    return 2


# ------------------------------------------------------------------ the test side


class PackerOnPath:
    """The fake installed as `packer` first on PATH for one test; repo_root is what the
    transcripts' {{ROOT}} stands for."""

    def __init__(self, folder: Path, monkeypatch, repo_root: Path):
        self.bin = folder / "bin"
        self.bin.mkdir()
        self.calls_file = folder / "packer-calls.jsonl"
        self.scenarios_file = folder / "packer-scenarios.json"
        self.scenarios: dict = {}
        self._launcher("packer", f'#!/bin/sh\nexec "{sys.executable}" "{Path(__file__).resolve()}" "$@"\n')
        # cd_files needs an ISO authoring tool on PATH; the fake build never runs it.
        self._launcher("xorriso", "#!/bin/sh\nexit 0\n")
        monkeypatch.setenv("PATH", f"{self.bin}{os.pathsep}{os.environ['PATH']}")
        monkeypatch.setenv("FAKE_PACKER_CALLS", str(self.calls_file))
        monkeypatch.setenv("FAKE_PACKER_SCENARIOS", str(self.scenarios_file))
        monkeypatch.setenv("FAKE_PACKER_ROOT", str(repo_root))
        # A user's debug setting must not reach the build (the runner removes it).
        monkeypatch.setenv("PACKER_LOG", "1")

    def _launcher(self, name: str, text: str) -> None:
        path = self.bin / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)

    def scenario(self, box: str, transcript: str, exit: int = 0, write_box: bool = True, line_delay: float = 0.0,
                 wait_for_interrupt: bool = False) -> None:
        self.scenarios[box] = {"transcript": transcript, "exit": exit, "write_box": write_box, "line_delay": line_delay,
                               "wait_for_interrupt": wait_for_interrupt}
        self.scenarios_file.write_text(json.dumps(self.scenarios))

    def calls(self) -> list[dict]:
        if not self.calls_file.exists():
            return []
        return [json.loads(line) for line in self.calls_file.read_text().splitlines()]

    def builds(self) -> list[dict]:
        return [c for c in self.calls() if c["argv"][:1] == ["build"]]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
