"""A stand-in for the `packer` executable (HashiCorp Packer 1.9.4 CLI), at the process boundary only.

Tests put it first on PATH with PackerOnPath. It logs every invocation
(argv, cwd and the environment facts the runner controls) as one JSON line to
$FAKE_PACKER_CALLS, and:
  packer -machine-readable version   prints $FAKE_PACKER_VERSION (default 1.9.4)
  packer plugins installed           prints $FAKE_PACKER_PLUGINS (one path per line; unset: the pinned plugins)
  packer init / validate ...         run the real Packer ($FAKE_PACKER_REAL, with
                                     $FAKE_PACKER_PLUGIN_PATH as PACKER_PLUGIN_PATH when set):
                                     neither needs Hyper-V, and the build runs both first
  packer build ... TEMPLATE          first, as Packer's download step, fails when no ISO the
                                     builder names (iso_url / iso_urls, with -var, PKR_VAR_ and
                                     defaults resolved) is a URL or an existing file; the call log's
                                     "isos" says which one each builder installs from. Then
                                     replays the scenario for box = TEMPLATE's stem from
                                     the JSON file $FAKE_PACKER_SCENARIOS:
      {"<box>": {"transcript": "windows-success.txt", "exit": 0,
                 "write_box": true, "line_delay": 0.0}}
    guest_files maps a guest path to its text: each file provisioner with "direction": "download"
    whose source is one of them writes that text to its destination, as Packer does once the
    provisioners ran; a download of a path the scenario does not hold fails the build, as
    Packer's does when the guest has no such file.
    write_box creates the box where the template's vagrant post-processor says
    (a real tar.gz holding metadata.json), also on failure, like an interrupted write;
    "before_wait" writes it before waiting for the interrupt, as if Packer was writing it then.
    wait_for_interrupt stops before the transcript's "Cancelling build" line until SIGINT
    arrives (as the runner forwards Ctrl-C), then prints the rest.
    plugin starts a child in Packer's process group that, like Packer's plugins, ignores
    SIGINT and has its own output; Packer here exits without stopping it. Its pid and the
    fake's own are appended to $FAKE_PACKER_PIDS.
The transcripts are in packer_transcripts/ (its README says where their format comes from).
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import stat
import subprocess
import sys
import tarfile
import time
from pathlib import Path

# Run as a script (the packer launcher): import the k4w of this checkout, not whichever one the venv's
# editable install names (a git worktree shares the main checkout's venv).
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from k4w.infra import packer_hcl, pinned_tools, tools  # noqa: E402
from k4w.infra import packer_cli  # noqa: E402

TRANSCRIPTS = Path(__file__).parent / "packer_transcripts"
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")
# A plugin process: ignores Ctrl-C (Packer's plugins leave cancelling to Packer) and lives long.
# It says "ready" once it ignores Ctrl-C, then closes its output, so it never holds the runner's pipe.
PLUGIN = ("import os, signal, sys, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nprint('ready', flush=True)\n"
          "sys.stdout.close()\nos.close(1)\ntime.sleep(600)\n")


def record_pid(pid: int) -> None:
    pids = os.environ.get("FAKE_PACKER_PIDS")
    if pids:
        with open(pids, "a", encoding="utf-8") as fh:
            fh.write(f"{pid}\n")


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
        "proxy_env": {name: os.environ[name] for name in PROXY_VARIABLES if name in os.environ},
    }
    if argv[:1] == ["build"]:
        template = packer_hcl.load(Path(argv[-1]))
        record["iso_checksums"] = [b.get("iso_checksum") for b in template.get("builders", [])]
        # The input variables as Packer resolves them: defaults (env("X") from this process's
        # environment), PKR_VAR_<name>, then -var.
        record["variables"] = variable_values(template, argv)
        record["isos"] = [iso_read(b, record["variables"])[0] for b in template.get("builders", [])]
    with open(calls, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")


def variable_values(template: dict, argv: list[str]) -> dict[str, str]:
    return packer_hcl.variable_values(template, dict(os.environ), packer_cli.given_variables(argv))


def iso_read(builder: dict, variables: dict[str, str]) -> tuple[str | None, list[str]]:
    """The ISO a builder installs from, as Packer's download step picks it: the first of iso_urls
    (or iso_url) that is a URL or a local file that exists; and the local files it found missing.
    A URL is not fetched: the fake stands for a host whose download would work."""
    urls = packer_hcl.resolve_all(builder.get("iso_urls") or [builder.get("iso_url")], variables)
    missing = []
    for url in (u for u in urls if u):
        if re.match(r"^[a-z][a-z0-9+.-]+://", url):
            return url, missing
        if Path(url).is_file():
            return url, missing
        missing.append(url)
    return None, missing


def template_env(template: dict, name: str) -> str:
    """A step variable as the guest gets it: the template's ${var.x} references filled in."""
    variables = packer_hcl.variable_values(template, dict(os.environ))
    for prov in template.get("provisioners", []):
        for entry in prov.get("environment_vars", []):
            key, _, value = packer_hcl.resolve(entry, variables).partition("=")
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
            # The provider the real post-processor names for the builder (k4w.infra.packer_hcl.BOX_PROVIDERS
            # says where it is read): hyperv for hyperv-iso, libvirt for qemu.
            provider = packer_hcl.box_provider(template) or "hyperv"
            target = Path(pp["output"].replace("{{.Provider}}", provider))
            target.parent.mkdir(parents=True, exist_ok=True)
            data = json.dumps({"provider": provider}).encode()
            with tarfile.open(target, "w:gz") as tar:
                info = tarfile.TarInfo("metadata.json")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            return
    sys.exit("fake packer: the template has no vagrant post-processor")


def download_guest_files(template: dict, guest_files: dict[str, str]) -> bool:
    """The template's download provisioners, from the scenario's guest files; False on a missing one."""
    for prov in template.get("provisioners", []):
        if prov.get("type") == "file" and prov.get("direction") == "download":
            if prov["source"] not in guest_files:
                print(f"==> hyperv-iso: Downloading {prov['source']} => {prov['destination']}\n"
                      f"Build 'hyperv-iso' errored after 1 second: the guest has no {prov['source']}", flush=True)
                return False
            target = Path(prov["destination"])
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(guest_files[prov["source"]], encoding="utf-8")
    return True


def build(argv: list[str]) -> int:
    template_path = Path(argv[-1])
    template = packer_hcl.load(template_path)
    box = template_path.name.removesuffix(packer_hcl.SUFFIX)
    variables = variable_values(template, argv)
    for builder in template.get("builders", []):
        if "iso_url" in builder or "iso_urls" in builder:
            used, missing = iso_read(builder, variables)
            if used is None:
                # Packer's download step, every URL failed (hashicorp/packer-plugin-sdk@v0.4.0
                # multistep/commonsteps/step_download.go: "error downloading ISO: [errors]").
                # -machine-readable writes a comma in a message as %!(PACKER_COMMA), as the transcripts show.
                errors = " ".join(f"stat {path}: no such file or directory" for path in missing)
                message = (f"Build '{builder['type']}.{builder['name']}' errored after 1 second: "
                           f"error downloading ISO: [{errors}]").replace(",", "%!(PACKER_COMMA)")
                print(f"{int(time.time())},,ui,error,{message}", flush=True)
                return 1
    scenarios = json.loads(Path(os.environ["FAKE_PACKER_SCENARIOS"]).read_text(encoding="utf-8"))
    scenario = scenarios[box]
    delay = float(scenario.get("line_delay", 0))
    interrupted = []
    if scenario.get("wait_for_interrupt"):
        signal.signal(signal.SIGINT, lambda *_: interrupted.append(True))
    record_pid(os.getpid())
    if scenario.get("plugin"):
        plugin = subprocess.Popen([sys.executable, "-c", PLUGIN], stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        plugin.stdout.readline()  # ready: an interrupt from now on no longer stops it
        plugin.stdout.close()
        record_pid(plugin.pid)
    for line in (TRANSCRIPTS / scenario["transcript"]).read_text(encoding="utf-8").splitlines():
        if scenario.get("wait_for_interrupt") and "Cancelling build after receiving" in line:
            if scenario.get("write_box") == "before_wait":
                write_box(template)
            deadline = time.monotonic() + 30
            while not interrupted and time.monotonic() < deadline:
                time.sleep(0.05)
            if not interrupted:
                print("fake packer: no interrupt arrived within 30 s", file=sys.stderr)
                return 2
        print(substitute(line, template, box), flush=True)
        if delay:
            time.sleep(delay)
    if "guest_files" in scenario and not download_guest_files(template, scenario["guest_files"]):
        return 1
    if scenario.get("write_box") is True:
        write_box(template)
    return int(scenario.get("exit", 0))


def real_packer(argv: list[str]) -> int:
    """Run the real Packer the test found (k4w.infra.tools.find before the fake went on PATH), with its plugins."""
    real = os.environ.get("FAKE_PACKER_REAL")
    if not real:
        print(f"fake packer: no real packer for `packer {argv[0]}` (bash scripts/setup.sh builds the pinned one)", file=sys.stderr)
        return 2
    env = dict(os.environ)
    if os.environ.get("FAKE_PACKER_PLUGIN_PATH"):
        env["PACKER_PLUGIN_PATH"] = os.environ["FAKE_PACKER_PLUGIN_PATH"]
    return subprocess.run([real, *argv], check=False, env=env).returncode


def pinned_plugins_installed() -> str:
    """What `packer plugins installed` prints once `packer init` installed the pinned plugins."""
    pins = pinned_tools.packer_pins()
    return "\n".join(f"/home/u/.config/packer/plugins/github.com/hashicorp/{name}/packer-plugin-{name}_v{pins[name]}_x5.0_linux_amd64"
                     for name in pinned_tools.PACKER_PLUGINS)


def main(argv: list[str]) -> int:
    log_call(argv)
    if "version" in argv:
        version = os.environ.get("FAKE_PACKER_VERSION", "1.9.4")
        print(f"1714550400,,version,{version}\n1714550400,,version-prelease,\n1714550400,,ui,say,Packer v{version}")
        return 0
    if argv[:2] == ["plugins", "installed"]:
        print(os.environ["FAKE_PACKER_PLUGINS"] if "FAKE_PACKER_PLUGINS" in os.environ else pinned_plugins_installed())
        return 0
    if argv and argv[0] == "build":
        return build(argv)
    if argv and argv[0] in ("init", "validate"):
        return real_packer(argv)
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
        self.pids_file = folder / "packer-pids.txt"
        self.scenarios: dict = {}
        self._launcher("packer", f'#!/bin/sh\nexec "{sys.executable}" "{Path(__file__).resolve()}" "$@"\n')
        # The real Packer and its plugins, found before the fake goes on PATH; then k4w must find the
        # fake, so the pinned cache it prefers is hidden (an empty K4W_TOOLS_DIR).
        real = tools.find("packer")
        monkeypatch.setenv("FAKE_PACKER_REAL", real or "")
        monkeypatch.setenv("FAKE_PACKER_PLUGIN_PATH", packer_cli.plugin_env(real).get("PACKER_PLUGIN_PATH", "") if real else "")
        (folder / "no-pinned-tools").mkdir()
        monkeypatch.setenv("K4W_TOOLS_DIR", str(folder / "no-pinned-tools"))
        # cd_files needs an ISO authoring tool on PATH; the fake build never runs it.
        self._launcher("xorriso", "#!/bin/sh\nexit 0\n")
        monkeypatch.setenv("PATH", f"{self.bin}{os.pathsep}{os.environ['PATH']}")
        monkeypatch.setenv("FAKE_PACKER_CALLS", str(self.calls_file))
        monkeypatch.setenv("FAKE_PACKER_SCENARIOS", str(self.scenarios_file))
        monkeypatch.setenv("FAKE_PACKER_ROOT", str(repo_root))
        monkeypatch.setenv("FAKE_PACKER_PIDS", str(self.pids_file))
        monkeypatch.setenv("FAKE_PACKER_BIN", str(self.bin))
        # The fake stands in for Packer on a Hyper-V host: the build's host check lets it run
        # (k4w.commands.doctor.FAKE_HYPERV_HOST_ENV, a test-only stand-in).
        monkeypatch.setenv("K4W_TEST_FAKE_HYPERV_HOST", "1")
        # A user's debug setting must not reach the build (the runner removes it).
        monkeypatch.setenv("PACKER_LOG", "1")

    def _launcher(self, name: str, text: str) -> None:
        path = self.bin / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)

    def scenario(self, box: str, transcript: str, exit: int = 0, write_box: bool | str = True, line_delay: float = 0.0,
                 wait_for_interrupt: bool = False, plugin: bool = False, guest_files: dict[str, str] | None = None) -> None:
        self.scenarios[box] = {"transcript": transcript, "exit": exit, "write_box": write_box, "line_delay": line_delay,
                               "wait_for_interrupt": wait_for_interrupt, "plugin": plugin}
        if guest_files is not None:
            self.scenarios[box]["guest_files"] = guest_files
        self.scenarios_file.write_text(json.dumps(self.scenarios))

    def pids(self) -> list[int]:
        """The fake's own pid and its plugin's, of every build so far."""
        return [int(p) for p in self.pids_file.read_text().split()] if self.pids_file.exists() else []

    def calls(self) -> list[dict]:
        if not self.calls_file.exists():
            return []
        return [json.loads(line) for line in self.calls_file.read_text().splitlines()]

    def builds(self) -> list[dict]:
        return [c for c in self.calls() if c["argv"][:1] == ["build"]]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
