"""A stand-in for the `packer` executable, used at the process boundary only.

Tests put a `packer` launcher for this script first on PATH. It logs every invocation
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
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import sys
import tarfile
import time
from pathlib import Path

TRANSCRIPTS = Path(__file__).parent / "fixtures" / "transcripts"


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


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
