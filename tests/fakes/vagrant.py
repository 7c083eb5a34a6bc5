"""A stand-in for the `vagrant` executable (HashiCorp Vagrant 2.x CLI), at the process boundary only.

One fake serves every caller: cluster-up / cluster-reset (through k4w.infra.vagrant and
VagrantRemote) and test-box / cluster-test (k4w.verify.flows). Tests install it first on PATH
with VagrantOnPath. It appends every call to $FAKE_VAGRANT_LOG as a JSON line (argv, cwd and
$K4W_CLUSTER_JSON), keeps machine states in $FAKE_VAGRANT_DIR/machines.json and answers:

  status [NAME...]                 machine-readable states (not_created until `up`); like the Hyper-V
                                   provider, it deletes the id file of a machine whose VM is gone
  up / destroy [NAME...]           change the states (a created VM gets a new Id in
                                   $VAGRANT_DOTFILE_PATH/machines/NAME/hyperv/id, as Vagrant records it); `up` of a machine takes scenario["boot_seconds"][NAME]
                                   seconds (default 0) and logs its start and end ("span"), so tests can
                                   measure concurrency; creating a machine whose box is not installed adds it
                                   from its catalogue under a non-blocking lock, as Vagrant's HandleBox does:
                                   a second process adding the same box at once fails (DownloadAlreadyInProgress)
  box list --machine-readable      the boxes added; box add CATALOGUE adds its newest version
  ssh|winrm NAME ... --command C   a healthy cluster's answer (cluster_answers.py) on stdout, with the
                                   noise a real run prints on stderr (STDERR_NOISE); winrm adds the k4w
                                   wrapper's exit-code marker and exits 1 on failure, as Vagrant does
  upload SOURCE DESTINATION NAME   checks SOURCE exists
  ssh-config [NAME...]             the recorded outputs in vagrant_outputs/, with HostName and Port
  winrm-config                     pointed at 127.0.0.1:$FAKE_VAGRANT_TARGET_PORT (nobody listens there)

The machines are those of $K4W_CLUSTER_JSON, or the single machine `default` of a throwaway
Vagrantfile (test-box). Failures are injected with the scenario in $FAKE_VAGRANT_DIR/scenario.json
(see cluster_answers.py); each one is consumed, so a rerun goes through.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import sys
import time
import uuid
from pathlib import Path

from . import cluster_answers

OUTPUTS = Path(__file__).parent / "vagrant_outputs"
# What real ssh/winrm runs print on stderr next to the answer: Vagrant's own notice, ssh's known-hosts
# warning and sudo's complaint about a hostname Vagrant just changed. k4w must parse stdout only.
STDERR_NOISE = (
    "==> vagrant: A new version of Vagrant is available: 2.4.1 (installed version: 2.3.4)!\n"
    "Warning: Permanently added '127.0.0.1' (ED25519) to the list of known hosts.\n"
    "sudo: unable to resolve host master: Name or service not known\n"
)
ROOT = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------ the executable


class _State:
    def __init__(self, folder: str):
        self.machines_path = os.path.join(folder, "machines.json")
        self.scenario_path = os.path.join(folder, "scenario.json")
        self.boxes_path = os.path.join(folder, "boxes.json")
        self.machines = _read_json(self.machines_path, {})
        self.scenario = _read_json(self.scenario_path, {})
        self.boxes = _read_json(self.boxes_path, [])

    def save(self) -> None:
        with open(self.machines_path, "w", encoding="utf-8") as fh:
            json.dump(self.machines, fh)
        with open(self.boxes_path, "w", encoding="utf-8") as fh:
            json.dump(self.boxes, fh)
        with open(self.scenario_path, "w", encoding="utf-8") as fh:
            json.dump(self.scenario, fh)


@contextlib.contextmanager
def _locked(folder: str, name: str = "state", blocking: bool = True):
    """An flock on folder/<name>.lock: concurrent fake processes share one machines.json."""
    with open(os.path.join(folder, f"{name}.lock"), "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _log(entry: dict) -> None:
    with open(os.environ["FAKE_VAGRANT_LOG"], "a", encoding="utf-8") as log:
        log.write(json.dumps(entry) + "\n")


def _newest(catalogue: dict) -> str:
    return max((v["version"] for v in catalogue["versions"]), key=lambda v: tuple(int(p) for p in v.split(".")))


def _add_box(state: "_State", catalogue_path: str) -> tuple[int, str]:
    catalogue = _read_json(catalogue_path, None)
    if catalogue is None:
        return 1, f"The box '{catalogue_path}' could not be found"
    box = [catalogue["name"], "hyperv", _newest(catalogue)]
    if box in state.boxes:
        return 1, f"The box you're attempting to add already exists: {box}"
    state.boxes.append(box)
    return 0, f"==> box: Successfully added box '{box[0]}' (v{box[2]}) for 'hyperv'!"


def _up_one(folder: str, machine: dict, args: list[str]) -> int:
    """One machine's `vagrant up`: its box (if missing), its boot time, its new state."""
    name = machine["name"]
    with _locked(folder):
        state = _State(folder)
        failed = cluster_answers.check_failure(state.scenario, " ".join(args))
        state.save()
        boot = float(state.scenario.get("boot_seconds", {}).get(name, 0))
        needs_box = (state.machines.get(name, "not_created") == "not_created" and machine.get("box_catalogue")
                     and os.path.exists(machine["box_catalogue"])
                     and not any(b[0] == f"k4w/{machine['box']}" for b in state.boxes))
    if failed:
        print(failed[1])
        return failed[0]
    started = time.time()
    if needs_box:
        with _locked(folder, f"box-{machine['box']}", blocking=False) as got:
            if not got:
                print("An existing download of this box is in progress (DownloadAlreadyInProgress)", file=sys.stderr)
                return 1
            time.sleep(float(state.scenario.get("box_add_seconds", 0.2)))
            with _locked(folder):
                state = _State(folder)
                _add_box(state, machine["box_catalogue"])
                state.save()
    print(f"Bringing machine '{name}' up with 'hyperv' provider...")
    time.sleep(boot)
    with _locked(folder):
        state = _State(folder)
        _set_created(state, name, True)
        state.save()
    _log({"span": name, "start": started, "end": time.time()})
    return 0


def _id_file(name: str) -> str | None:
    """<VAGRANT_DOTFILE_PATH>/machines/<name>/hyperv/id, where Vagrant keeps the Hyper-V VM's Id."""
    dotfile = os.environ.get("VAGRANT_DOTFILE_PATH")
    return os.path.join(dotfile, "machines", name, "hyperv", "id") if dotfile else None


def _set_created(state: "_State", name: str, created: bool) -> None:
    """A machine created (a new VM, a new Id) or destroyed, as Vagrant records it."""
    path = _id_file(name)
    if created and state.machines.get(name, "not_created") == "not_created" and path:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(str(uuid.uuid4()))
    if not created and path and os.path.exists(path):
        os.remove(path)
    state.machines[name] = "running" if created else "not_created"


def _read_json(path: str, default):
    if not os.path.exists(path):
        return default
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def _machines() -> list[dict]:
    cluster_json = os.environ.get("K4W_CLUSTER_JSON")
    if cluster_json:
        return _read_json(cluster_json, {"machines": []})["machines"]
    return [{"name": "default"}]


def _recorded_config(verb: str, names: list[str]) -> str:
    if verb == "winrm-config":
        name = "vagrant-winrm-config.txt"
    else:
        name = "vagrant-ssh-config-cluster.txt" if names else "vagrant-ssh-config-testbox.txt"
    text = (OUTPUTS / name).read_text()
    text = re.sub(r"HostName \S+", "HostName 127.0.0.1", text)
    port = os.environ.get("FAKE_VAGRANT_TARGET_PORT", "1")
    return re.sub(r"(?m)^(\s*)Port \d+", rf"\g<1>Port {port}", text)


def main(args: list[str]) -> int:
    verb = args[0] if args else ""
    entry = {"argv": args, "cwd": os.getcwd(), "cluster_json": os.environ.get("K4W_CLUSTER_JSON")}
    if verb in ("ssh", "winrm"):
        entry["stdin"] = sys.stdin.read()  # k4w always gives remote commands a stdin of their own
    _log(entry)
    folder = os.environ["FAKE_VAGRANT_DIR"]
    machines = _machines()
    names = [m["name"] for m in machines]
    targets = [a for a in args[1:] if a in names] or names
    if verb == "up" and len(targets) == 1:
        return _up_one(folder, next(m for m in machines if m["name"] == targets[0]), args)
    with _locked(folder):
        return _main_locked(args, verb, _State(folder), machines, targets)


def _main_locked(args: list[str], verb: str, state: _State, machines: list[dict], targets: list[str]) -> int:
    if verb == "box":
        if args[1:3] == ["list", "--machine-readable"]:
            for name, provider, version in state.boxes:
                print(f"1,,box-name,{name}\n1,,box-provider,{provider}\n1,,box-version,{version}")
            return 0
        if args[1] == "add":
            code, output = _add_box(state, args[2])
            state.save()
            print(output)
            return code

    if verb == "status":
        for name in targets:
            if state.machines.get(name, "not_created") == "not_created":
                _set_created(state, name, False)   # read_state forgets the Id of a VM that is gone
            print(f"1,{name},provider-name,hyperv")
            print(f"1,{name},state,{state.machines.get(name, 'not_created')}")
        return 0
    if verb in ("up", "destroy"):
        failed = cluster_answers.check_failure(state.scenario, " ".join(args))
        if failed:
            state.save()
            print(failed[1])
            return failed[0]
        for name in targets:
            print(f"Bringing machine '{name}' up with 'hyperv' provider..." if verb == "up" else f"==> {name}: Stopping the machine...")
            _set_created(state, name, verb == "up")
        state.save()
        return 0
    if verb in ("ssh", "winrm"):
        command = args[args.index("--command") + 1]
        code, output = cluster_answers.answer(state.scenario, machines, command)
        state.save()
        sys.stderr.write(STDERR_NOISE)
        sys.stdout.write(output)
        if verb == "winrm":
            # vagrant winrm exits 1 on any failure; the k4w wrapper's marker carries the real code
            print(f"k4w-exit-code:{code}")
            return 1 if code else 0
        return code
    if verb == "upload":
        failed = cluster_answers.check_failure(state.scenario, "upload " + " ".join(args[1:]))
        state.save()
        if failed:
            print(failed[1])
            return failed[0]
        if not os.path.exists(args[1]):
            print(f"source {args[1]} does not exist")
            return 1
        return 0
    if verb in ("ssh-config", "winrm-config"):
        # Vagrant's notices go to stderr; only stdout is the config.
        print("==> vagrant: A new version of Vagrant is available: 2.4.1 (installed version: 2.3.4)!", file=sys.stderr)
        print(_recorded_config(verb, args[1:]), end="")
        return 0
    print(f"fake vagrant: unsupported command {args}", file=sys.stderr)
    return 64


# ------------------------------------------------------------------ the test side


class VagrantOnPath:
    """The fake installed as `vagrant` first on PATH for one test, with its log and state in folder."""

    def __init__(self, folder: Path, monkeypatch):
        self.dir = folder / "fake-vagrant"
        self.dir.mkdir(parents=True)
        self.log = self.dir / "calls.jsonl"
        bin_dir = folder / "bin"
        bin_dir.mkdir(exist_ok=True)
        self.exe = bin_dir / "vagrant"
        # This interpreter in the shebang, without site (a pyenv/venv shim would cost ~0.2 s a call).
        self.exe.write_text(f"#!{sys.executable} -S\nimport sys\nsys.path.insert(0, {str(ROOT)!r})\n"
                            "from tests.fakes.vagrant import main\nsys.exit(main(sys.argv[1:]))\n")
        self.exe.chmod(0o755)
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
        monkeypatch.setenv("FAKE_VAGRANT_DIR", str(self.dir))
        monkeypatch.setenv("FAKE_VAGRANT_LOG", str(self.log))
        self._monkeypatch = monkeypatch

    def host_powershell(self) -> None:
        """Also answer for the Hyper-V host's PowerShell (k4w.cluster.network.HOST_POWERSHELL_ENV): each call is
        recorded like Vagrant's, {"argv": ["powershell", ...], "stdin": the script}, and succeeds."""
        exe = self.exe.parent / "powershell-fake"
        exe.write_text(f"#!{sys.executable} -S\nimport json, os, sys\n"
                       "entry = {'argv': ['powershell', *sys.argv[1:]], 'stdin': sys.stdin.read()}\n"
                       "open(os.environ['FAKE_VAGRANT_LOG'], 'a', encoding='utf-8').write(json.dumps(entry) + '\\n')\n")
        exe.chmod(0o755)
        self._monkeypatch.setenv("K4W_HOST_POWERSHELL", str(exe))

    def _entries(self) -> list[dict]:
        return [json.loads(line) for line in self.log.read_text().splitlines()] if self.log.is_file() else []

    def calls(self) -> list[dict]:
        """Every call so far: {"argv", "cwd", "cluster_json"} (ssh and winrm: also "stdin")."""
        return [e for e in self._entries() if "argv" in e]

    def spans(self) -> dict[str, tuple[float, float]]:
        """{machine: (start, end)} of every finished `vagrant up NAME`, in wall-clock seconds."""
        return {e["span"]: (e["start"], e["end"]) for e in self._entries() if "span" in e}

    def argvs(self) -> list[list[str]]:
        return [call["argv"] for call in self.calls()]

    def scenario(self, data: dict) -> None:
        """Failures to inject and cluster states to answer with (cluster_answers.py)."""
        (self.dir / "scenario.json").write_text(json.dumps(data))
