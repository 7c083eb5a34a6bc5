"""build/cluster-state.json: which cluster-up steps are done, so a rerun resumes.

A step is recorded only after it finished. The file also keeps a digest of the rendered
cluster.json and kubeadm config: resuming a half-built cluster from a different config would
mix two clusters, so that is refused with a message naming cluster-reset/cluster-down. And it
keeps the Hyper-V VM id of each machine ("vms"), so that a VM destroyed or re-created outside
cluster-up is noticed (steps.check_vms_are_the_recorded_ones) instead of trusted.
"""

from __future__ import annotations

import json
import secrets
import time
from pathlib import Path

from pydantic import StrictInt, StrictStr

from k4w.infra import documents
from k4w.infra.errors import K4wError
from k4w.outdir import private
from .api_models import Shape

STATE_FILE = "cluster-state.json"
VERSION = 1


class StepDone(Shape):
    at: StrictStr
    seconds: float


class StateFile(Shape):
    """What State.save writes; a field of another shape is named, not met later as a traceback."""

    version: StrictInt
    digest: StrictStr
    steps: dict[str, StepDone]
    nodes: dict[str, dict]
    vms: dict[str, StrictStr | None] | None = None


class State:
    def __init__(self, path: Path, digest: str, data: dict | None = None):
        self.path = Path(path)
        self.digest = digest
        self.data = data or {"version": VERSION, "digest": digest, "steps": {}, "nodes": {}}

    @classmethod
    def load(cls, out: Path, digest: str, config_changed_ok: bool = False) -> "State":
        """config_changed_ok: cluster-reset, the very command the refusal below names, which
        undoes kubeadm whatever config built it and then records the new one."""
        path = Path(out) / STATE_FILE
        if not path.is_file():
            return cls(path, digest)
        source = f"{path} (delete it to start over: invoke cluster-down)"
        data = documents.json_value(path.read_text(encoding="utf-8"), source)
        if isinstance(data, dict) and data.get("version") != VERSION:
            raise K4wError(f"{path} was written by another k4w version; run invoke cluster-down (or delete it)")
        documents.parse(StateFile, data, source)
        if data.get("version") != VERSION:
            raise K4wError(f"{path} was written by another k4w version; run invoke cluster-down (or delete it)")
        if data.get("digest") != digest and data.get("steps") and not config_changed_ok:
            raise K4wError(
                f"the rendered cluster config changed since {path} was written (steps done: "
                f"{', '.join(data['steps'])}). Run `invoke cluster-reset` (keeps the VMs) or "
                "`invoke cluster-down` before bringing up a different cluster."
            )
        data["digest"] = digest
        return cls(path, digest, data)

    def installation(self, recorded: str | None = None) -> str:
        """This installation's id (one per --out), made once and kept by cluster-reset: the value of the
        k4w.io/installation label its nodes register with (k4w.derive.node_marks), so that another host's k4w on
        the same cluster never takes them, or the objects they share, for its own. recorded: the id in
        OUT/existing-cluster.json, which wins, so that a state file deleted (as some messages suggest)
        while that record stays does not make a new id that refuses this installation's own nodes."""
        if recorded and self.data.get("installation") != recorded:
            self.data["installation"] = recorded
            self.save()
        if not self.data.get("installation"):
            self.data["installation"] = secrets.token_hex(6)   # 12 hex digits: a valid label value
            self.save()
        return self.data["installation"]

    def done(self, step: str) -> bool:
        return step in self.data["steps"]

    def mark(self, step: str, seconds: float) -> None:
        self.data["steps"][step] = {"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "seconds": round(seconds, 1)}
        self.save()

    def node(self, name: str) -> dict:
        return self.data["nodes"].setdefault(name, {})

    def set_node(self, name: str, **values) -> None:
        self.node(name).update(values)
        self.save()

    def vms(self) -> dict[str, str | None] | None:
        """{machine: Hyper-V VM id} recorded after the VMs were last brought up; None if never."""
        return self.data.get("vms")

    def set_vms(self, ids: dict[str, str | None]) -> None:
        self.data["vms"] = dict(ids)
        self.save()

    def clear_after(self, keep: tuple[str, ...]) -> None:
        self.data["steps"] = {k: v for k, v in self.data["steps"].items() if k in keep}
        self.data["nodes"] = {}
        self.save()

    def save(self) -> None:
        # Owner-only, as before: it names the join tokens' ids. One cluster-up at a time holds OUT's lock.
        private.write_private(self.path, json.dumps(self.data, indent=2))

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)
