"""build/e2e/report.json: what the end-to-end run did, for machines (CI dashboards, the next session).

It holds the phases with their seconds, the components the run served as CI stand-ins (`stand_ins`:
the seed era's; [] when every file was the real one), each box step with its status (`ran`, `skipped` with the
reason the step logged, `failed`, `not run`) and seconds, the host fetch, the proxy requests the
build guest made split into apt and other (component downloads counted apart: the goal is 0),
the box spec's results, the secret scan and the idempotence check.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, is_dataclass
from pathlib import Path

from . import cluster_run

NAME = "report.json"
FORMAT = 1
# Packer's machine-readable lines: <unix time>,<target>,<type>,<data...> (Packer docs, "Machine-readable output").
_STEP_START = re.compile(r"^(\d+),[^,]*,ui,say,==> \S+: Provisioning with shell script: (?P<script>\S+)$")
_TIME = re.compile(r"^(\d+),")
# What a step prints when its profile switches it off (guest/ubuntu/lib.sh k4w_log format).
_SKIPPED = re.compile(r"k4w (?P<step>\S+): SKIPPED: (?P<reason>.*)$")
_ARTIFACT = re.compile(r"^\d+,[^,]*,artifact,")


def box_steps(provision: list[str], log_text: str) -> list[dict]:
    """Each step of the profile's list, from the box's build log."""
    starts: dict[str, tuple[int, int]] = {}  # step -> (line index, unix time)
    lines = log_text.splitlines()
    last_time = None
    for index, line in enumerate(lines):
        stamp = _TIME.match(line)
        if stamp:
            last_time = int(stamp.group(1))
        match = _STEP_START.match(line)
        if match:
            starts[Path(match["script"]).name] = (index, int(match.group(1)))
    finished = any(_ARTIFACT.match(line) for line in lines)
    steps = []
    for position, step in enumerate(provision):
        if step not in starts:
            steps.append({"step": step, "status": "not run", "reason": "the build never reached it", "seconds": None})
            continue
        begin, began = starts[step]
        following = [starts[s] for s in provision[position + 1:] if s in starts]
        end, ended = following[0] if following else (len(lines), last_time)
        segment = lines[begin:end]
        skipped = next((m for m in map(_SKIPPED.search, segment) if m), None)
        if skipped:
            status, reason = "skipped", skipped["reason"].replace("%!(PACKER_COMMA)", ",")
        elif following or finished:
            status, reason = "ran", ""
        else:
            status, reason = "failed", "the build stopped in this step"
        steps.append({"step": step, "status": status, "reason": reason,
                      "seconds": (ended - began) if ended is not None else None})
    return steps


def _plain(value):
    if is_dataclass(value):
        return {k: _plain(v) for k, v in asdict(value).items()}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def build(result) -> dict:
    """The report of one run (an E2EResult, finished or failed)."""
    spec = result.spec or {}
    return {
        "format": FORMAT,
        "ok": result.ok,
        "error": result.error,
        "phases": [{"name": p.name, "seconds": round(p.seconds, 1), "status": p.status, "note": p.note}
                   for p in result.phases],
        "total_seconds": round(sum(p.seconds for p in result.phases), 1),
        "base_image": {"folder": _plain(result.base_image), "reused": result.base_reused},
        # Components served as CI stand-ins instead of the real files (the seed era's); [] for none.
        "stand_ins": result.stand_ins,
        "fetch": result.fetch,
        "box_steps": result.steps,
        "proxy_during_bake": _plain(result.proxy_build),
        "proxy_during_rerun": _plain(result.proxy_rerun),
        "box_spec": {k: spec.get(k) for k in ("passed", "failed", "errors", "deselected", "outcome") if k in spec} or None,
        "secret_scan": result.secret_scan,
        "ssh_host_keys": result.host_keys,
        "idempotence": result.idempotence,
        "leftover_processes": result.leftovers,
        "box": _plain(result.box_file),
        # --cluster: seconds per step, stand_ins (none in this era) and the substitutes under their own key.
        "cluster": cluster_run.report_json(getattr(result, "cluster", None)),
        # --provider libvirt: each k4w command by its name, with seconds and checks; provider and stand_ins.
        "libvirt": _plain(getattr(result, "libvirt", None)),
        # --offline: the images built and pushed, pinned and imported, and registry_requests_during_bake
        # from the registries' own access logs (goal 0).
        "offline": _plain(getattr(result, "offline", None)),
    }



def write(path: Path, result) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(build(result), indent=2) + "\n", encoding="utf-8")
