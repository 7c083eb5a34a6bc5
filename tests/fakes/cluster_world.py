"""In-process stand-ins for what cluster-up drives: Vagrant (python-vagrant's driver), the guests
(k4w.cluster.remote.RemoteExec), the Hyper-V host's PowerShell and the clock.

They replace the seams k4w.cluster.up takes as arguments; tests/fakes/vagrant.py replaces the
`vagrant` executable itself, for the tests that go through the real driver.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from k4w.cluster.machines import DOTFILE_DIR
from k4w.cluster.remote import RemoteError
from k4w.infra.vagrant import PROVIDER

from . import cluster_answers


class FakeClock:
    """Time moves only when the code sleeps: timeouts are tested without waiting."""

    def __init__(self) -> None:
        self.t = 1000.0
        self.slept = 0.0

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds
        self.slept += seconds


class FakeWorld:
    """One log of everything that reached Vagrant, the guests or the host, in order."""

    def __init__(self, machines: list[dict], scenario: dict | None = None, provider: str = PROVIDER):
        self.machines = machines
        self.provider = provider   # host.provider: where Vagrant keeps ids, what box list shows
        self.scenario = scenario or {}
        self.states: dict[str, str] = {}
        self.log: list[str] = []
        # destination -> (text, mode) of every uploaded file, read at upload time
        self.uploaded: dict[str, tuple[str, int]] = {}
        self.stdins: list[tuple[str, str, str]] = []   # (node, command, its standard input)
        self.boxes: set[tuple[str, str, str]] | None = None  # None: every k4w box is installed
        self.vagrant = FakeVagrant(self)
        self.remote = FakeRemote(self)
        self.switch_exists = True
        # libvirt: the host's virsh (k4w.cluster.libvirt_network.Virsh), which a libvirt test points at the fake
        # virsh process (tests/fakes/virsh.py); None on Hyper-V.
        self.virsh = None

    def id_file(self, name: str) -> Path | None:
        """Where Vagrant keeps the machine's Hyper-V VM id (k4w.cluster.machines.vm_id), once tests set .out."""
        out = getattr(self, "out", None)
        return Path(out) / DOTFILE_DIR / "machines" / name / self.provider / "id" if out else None

    def destroy_out_of_band(self, name: str) -> None:
        """The VM deleted in Hyper-V Manager: Vagrant still has its id until its next status."""
        self.states[name] = "not_created"

    def recreate_out_of_band(self, name: str) -> str:
        """`vagrant destroy NAME` + `vagrant up NAME` typed by hand: a new VM with a new id."""
        self.states[name] = "running"
        new = str(uuid.uuid4())
        self.id_file(name).write_text(new)
        return new

    def host(self, script: str) -> tuple[int, str]:
        """The host's PowerShell: the switch check, or a host script's command line (logged as is);
        failures are injected like the guests' (scenario "fail", matched on the command)."""
        if "Get-VMSwitch" in script:
            self.log.append("host: switch check")
            return (0, "") if self.switch_exists else (3, "")
        self.log.append(f"host: {script}")
        failed = cluster_answers.check_failure(self.scenario, script)
        return failed if failed else (0, "")

    def commands(self) -> list[str]:
        return list(self.log)


class FakeVagrant:
    def __init__(self, world: FakeWorld):
        self.world = world

    def status(self) -> dict[str, str]:
        self.world.log.append("vagrant status")
        states = {m["name"]: self.world.states.get(m["name"], "not_created") for m in self.world.machines}
        for name, state in states.items():
            path = self.world.id_file(name)
            if state == "not_created" and path:
                path.unlink(missing_ok=True)   # as the Hyper-V provider's read_state forgets a VM that is gone
        return states

    def up(self, names: list[str]) -> None:
        self.world.log.append("vagrant up " + " ".join(names))
        failed = cluster_answers.check_failure(self.world.scenario, "vagrant up " + " ".join(names))
        if failed:
            from k4w.infra.errors import K4wError

            raise K4wError(f"vagrant up failed with exit code {failed[0]}")
        for name in names:
            path = self.world.id_file(name)
            if path and self.world.states.get(name, "not_created") == "not_created":
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(str(uuid.uuid4()))   # Hyper-V's import gives the new VM its Id
            self.world.states[name] = "running"

    def boxes(self) -> set[tuple[str, str, str]]:
        self.world.log.append("vagrant box list")
        if self.world.boxes is None:
            return {(f"k4w/{m['box']}", self.world.provider, "0") for m in self.world.machines}
        return set(self.world.boxes)

    def box_add(self, catalogue: Path, check: bool = True) -> tuple[int, str]:
        self.world.log.append(f"vagrant box add {catalogue}")
        return 0, ""

    def destroy(self) -> None:
        self.world.log.append("vagrant destroy")
        for name in self.world.states:
            path = self.world.id_file(name)
            if path:
                path.unlink(missing_ok=True)
        self.world.states.clear()


class FakeRemote:
    def __init__(self, world: FakeWorld):
        self.world = world

    def run(self, machine, command: str, stdin: str = "") -> str:
        self.world.log.append(f"{machine.name}: {command}")
        self.world.stdins.append((machine.name, command, stdin))
        code, output = cluster_answers.answer(self.world.scenario, self.world.machines, command)
        if code:
            raise RemoteError(machine.name, command, code, output)
        return output

    def upload(self, machine, source: Path, destination: str) -> None:
        self.world.log.append(f"{machine.name}: upload {Path(source).name} {destination}")
        failed = cluster_answers.check_failure(self.world.scenario, f"upload {source} {destination}")
        if failed:
            raise RemoteError(machine.name, f"upload {source} {destination}", failed[0], failed[1])
        assert Path(source).exists(), f"upload of a missing file {source}"
        self.world.uploaded[destination] = (Path(source).read_text(errors="replace"), Path(source).stat().st_mode & 0o777)
