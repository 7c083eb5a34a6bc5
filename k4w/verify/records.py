"""The `test` entry of a box's build record (OUT/boxes/<box>.record.json).

The build runner writes the record (k4w.bake.catalogue) with an empty `test` slot; this only
fills that slot. Without a record (a box built elsewhere), the file gets `{"test": ...}` and
nothing else: no field is invented.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from k4w.infra import documents
from k4w.outdir import state as out_state
from ..bake import catalogue
from . import specrun


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def test_entry(result: dict, target: str, started: str, finished: str, stage: str) -> dict:
    return {
        "result": specrun.outcome(result),
        "passed": result["passed"],
        "failed": result["failed"],
        "errors": result["errors"],
        "skipped": result["skipped"],
        "deselected": result["deselected"],
        "stage": stage,
        "target": target,
        "started": started,
        "finished": finished,
        "junit": result["junit"],
    }


def record_test(out: Path, box: str, entry: dict) -> Path:
    path = catalogue.record_path(out, box)
    data: dict = {}
    if path.is_file():
        source = f"{path} (not overwriting the build record)"
        data = documents.json_value(path.read_text(encoding="utf-8"), source)
        documents.parse(out_state.BuildRecord, data, source)
    data["test"] = entry
    catalogue.write_json(path, data)
    return path
