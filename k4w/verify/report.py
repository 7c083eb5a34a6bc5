"""The cluster-test summary: one markdown table over every suite, plus what did not pass."""

from __future__ import annotations

from pathlib import Path

from k4w.infra import files as outfiles
from k4w.infra.redact import redact
from . import specrun


def markdown(results: dict[str, dict], title: str, when: str) -> str:
    lines = [
        f"# {title}",
        "",
        f"Finished {when}. Deselected checks did not run and are not counted as passed.",
        "",
        "| suite | result | passed | failed | errors | expected failures | deselected | JUnit |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for suite, res in results.items():
        lines.append(
            f"| {suite} | {specrun.outcome(res)} | {res['passed']} | {res['failed']} | {res['errors']} "
            f"| {res['xfailed']} | {len(res['deselected'])} | {Path(res['junit']).name} |"
        )
    failing = [(suite, t) for suite, res in results.items() for t in res["failed_tests"]]
    if failing:
        lines += ["", "## Not passed", ""] + [f"- {suite}: `{test}`" for suite, test in failing]
    expected = [(suite, x) for suite, res in results.items() for x in res.get("expected_failures", [])]
    if expected:
        lines += ["", "## Expected failures (known platform limits)", ""]
        lines += [f"- {suite}: `{x['test']}`: {x['reason']}" for suite, x in expected]
    deselected: dict[tuple[str, str, str], int] = {}
    for suite, res in results.items():
        for d in res["deselected"]:
            key = (suite, d["check"], d["reason"])
            deselected[key] = deselected.get(key, 0) + 1
    if deselected:
        lines += ["", "## Deselected (not run)", ""]
        lines += [f"- {suite}: {check} ({n}): {reason}" for (suite, check, reason), n in sorted(deselected.items())]
    return redact("\n".join(lines) + "\n")


def write(path: Path, text: str) -> Path:
    outfiles.write_file(path, text)
    return path
