"""A stand-in for libvirt's `virsh` (libvirt 9.0 CLI), at the process boundary only.

It answers the calls k4w makes on a Linux host (k4w.cluster.libvirt_network, k4w.commands.doctor_libvirt),
keeps the networks and storage pools in $FAKE_VIRSH_DIR/state.json and appends every argv to
$FAKE_VIRSH_DIR/calls.jsonl:

  -c URI                              required first, as k4w always names the connection
  uri / version                       the URI / libvirt 9.0.0 and QEMU 7.2.0 (exit 1 when state "down")
  net-list [--all] [--persistent] [--autostart] --name
  net-dumpxml [--inactive] NAME       the definition as libvirt keeps it: with a <uuid>, a <bridge name="virbrN">
                                      and a <mac> it added (k4w must not count those as differences); live
                                      XML differs from --inactive when the state says so
  net-define FILE                     stores the XML of FILE (replacing a definition of the same name)
  net-start / net-destroy / net-autostart / net-undefine NAME
  pool-list [--all] --name / pool-dumpxml NAME

Missing networks fail as virsh does: "error: Network not found: no network with matching name 'X'", exit 1.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

VERSION = ("Compiled against library: libvirt 9.0.0\nUsing library: libvirt 9.0.0\nUsing API: QEMU 9.0.0\n"
           "Running hypervisor: QEMU 7.2.0\n")


def _fail(message: str) -> int:
    sys.stderr.write(f"error: {message}\n")
    return 1


def _with_libvirt_additions(xml: str, index: int) -> str:
    """What libvirt adds to a definition it stores: a uuid, a bridge of its choosing and its MAC."""
    additions = (f"  <uuid>00000000-0000-4000-8000-{index:012d}</uuid>\n"
                 f"  <bridge name='virbr{index}' stp='on' delay='0'/>\n  <mac address='52:54:00:00:00:{index:02x}'/>\n")
    return re.sub(r"(</name>\n)", r"\1" + additions, xml, count=1)


def main(argv: list[str]) -> int:
    folder = Path(os.environ["FAKE_VIRSH_DIR"])
    with open(folder / "calls.jsonl", "a", encoding="utf-8") as log:
        log.write(json.dumps(argv) + "\n")
    path = folder / "state.json"
    state = json.loads(path.read_text()) if path.is_file() else {}
    nets = state.setdefault("networks", {})
    pools = state.setdefault("pools", {})
    if argv[:1] != ["-c"] or len(argv) < 3:
        return _fail("k4w always passes -c URI first")
    uri, command, args = argv[1], argv[2], argv[3:]
    flags = {a for a in args if a.startswith("--")}
    plain = [a for a in args if not a.startswith("--")]
    if state.get("down"):
        return _fail(f"failed to connect to the hypervisor\nerror: Failed to connect socket to '/var/run/libvirt/libvirt-sock': "
                     "No such file or directory")

    def network(name: str) -> dict | None:
        if name not in nets:
            _fail(f"failed to get network '{name}'\nerror: Network not found: no network with matching name '{name}'")
            return None
        return nets[name]

    if command == "uri":
        print(uri)
    elif command == "version":
        sys.stdout.write(VERSION)
    elif command == "net-list":
        chosen = [n for n, v in nets.items()
                  if ("--all" in flags or v["active"]) and ("--persistent" not in flags or v["persistent"])
                  and ("--autostart" not in flags or v["autostart"])]
        print("\n".join(sorted(chosen)) + "\n")
    elif command == "net-dumpxml":
        net = network(plain[0])
        if net is None:
            return 1
        live = net["active"] and "--inactive" not in flags
        sys.stdout.write(net.get("live_xml") if live and net.get("live_xml") else net["xml"])
    elif command == "net-define":
        xml = Path(plain[0]).read_text()
        name = re.search(r"<name>([^<]+)</name>", xml)[1]
        old = nets.get(name, {"active": False, "autostart": False})
        nets[name] = {**old, "xml": _with_libvirt_additions(xml, len(nets) + 1), "persistent": True}
        print(f"Network {name} defined from {plain[0]}\n")
    elif command in ("net-start", "net-destroy", "net-autostart", "net-undefine"):
        net = network(plain[0])
        if net is None:
            return 1
        if command == "net-start":
            if net["active"]:
                return _fail("network is already active")
            if plain[0] in state.get("start_fails", {}):
                return _fail(state["start_fails"][plain[0]])
            net["active"] = True
        elif command == "net-destroy":
            net["active"] = False
        elif command == "net-autostart":
            net["autostart"] = True
        else:
            del nets[plain[0]]
        print(f"Network {plain[0]} done: {command}\n")
    elif command == "pool-list":
        chosen = [n for n, v in pools.items() if "--all" in flags or v["active"]]
        print("\n".join(sorted(chosen)) + "\n")
    elif command == "pool-dumpxml":
        if plain[0] not in pools:
            return _fail(f"failed to get pool '{plain[0]}'\nerror: Storage pool not found: no storage pool with matching name '{plain[0]}'")
        pool = pools[plain[0]]
        sys.stdout.write(f"<pool type='dir'>\n  <name>{plain[0]}</name>\n  <capacity unit='bytes'>{pool['capacity']}</capacity>\n"
                         f"  <allocation unit='bytes'>{pool['capacity'] - pool['available']}</allocation>\n"
                         f"  <available unit='bytes'>{pool['available']}</available>\n"
                         "  <target>\n    <path>/var/lib/libvirt/images</path>\n  </target>\n</pool>\n")
    else:
        return _fail(f"the fake virsh does not know '{command}'")
    path.write_text(json.dumps(state))
    return 0


class VirshOnPath:
    """The fake installed as `virsh` first on PATH for one test, with its state in folder."""

    def __init__(self, folder: Path, monkeypatch):
        self.dir = folder / "fake-virsh"
        self.dir.mkdir(parents=True)
        bin_dir = folder / "bin"
        bin_dir.mkdir(exist_ok=True)
        exe = bin_dir / "virsh"
        root = Path(__file__).resolve().parents[2]
        exe.write_text(f"#!{sys.executable} -S\nimport sys\nsys.path.insert(0, {str(root)!r})\n"
                       "from tests.fakes.virsh import main\nsys.exit(main(sys.argv[1:]))\n")
        exe.chmod(0o755)
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
        monkeypatch.setenv("FAKE_VIRSH_DIR", str(self.dir))

    @property
    def state(self) -> dict:
        path = self.dir / "state.json"
        return json.loads(path.read_text()) if path.is_file() else {}

    @state.setter
    def state(self, value: dict) -> None:
        (self.dir / "state.json").write_text(json.dumps(value))

    def calls(self) -> list[list[str]]:
        log = self.dir / "calls.jsonl"
        return [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []

    def changes(self) -> list[list[str]]:
        """The calls that change something, without -c URI."""
        return [c[2:] for c in self.calls() if c[2] in ("net-define", "net-start", "net-destroy", "net-autostart", "net-undefine")]

    def network(self, name: str, xml: str, active: bool = True, autostart: bool = True, persistent: bool = True,
                live_xml: str | None = None) -> None:
        state = self.state
        state.setdefault("networks", {})[name] = {"xml": xml, "active": active, "autostart": autostart,
                                                  "persistent": persistent, "live_xml": live_xml}
        self.state = state
