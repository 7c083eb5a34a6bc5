"""Run a live spec with pytest in a child process and read back what happened.

The spec writes its own result file (--k4w-result, see k4w/verify/specs/conftest.py) from
pytest's terminal statistics, so the counts a record or report shows are the very ones
pytest printed; JUnit XML is written beside it for CI tools.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from k4w.infra import sources
from k4w.infra.errors import K4wError
from k4w.infra.redact import redact

# The runtime specs ship inside the package: they run against live hosts, never in the unit suite.
SPEC_DIR = Path(__file__).resolve().parent / "specs"
SPECS = {
    "ubuntu": [SPEC_DIR / "test_ubuntu_box.py"],
    "windows": [SPEC_DIR / "test_windows_box.py"],
    "cluster": [SPEC_DIR / "test_cluster_nodes.py", SPEC_DIR / "test_cluster_identities.py", SPEC_DIR / "test_cluster_connectivity.py"],
}

# pytest's exit codes (pytest.ExitCode): 0 all passed, 1 some failed, 2 interrupted,
# 3 internal error, 4 usage error, 5 nothing collected.
EXIT_MEANING = {0: "all passed", 1: "some checks failed", 2: "interrupted", 3: "pytest internal error",
                4: "usage error (missing target or option)", 5: "no check collected"}
NOT_RUN = (2, 3, 4)


@dataclass
class SpecRequest:
    """One pytest run of a spec against its target(s)."""

    suite: str  # a short name for reports: "box ubuntu-1604", "nodes windows-1803", "cluster"
    spec: str  # a key of SPECS
    args: list[str]  # target options: --hosts, --ssh-config, --k4w-box, ...
    junit: Path
    result: Path

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "pytest",
            *[str(p) for p in SPECS[self.spec]],
            # The specs are not under the default testpaths; run from the repo so its
            # pyproject (markers, --strict-markers) applies, and keep no cache in the tree.
            f"--rootdir={sources.REPO.root}",
            "-p",
            "no:cacheprovider",
            # Hypothesis' plugin costs a second or more per start and no spec uses it.
            "-p",
            "no:hypothesispytest",
            "-v",
            f"--junitxml={self.junit}",
            f"--k4w-result={self.result}",
            *self.public_args(),
        ]

    def public_args(self) -> list[str]:
        return [a for a in self.args if not _holds_secret(a)]

    def private_args(self) -> list[str]:
        """Target options that carry a credential (a winrm://user:password@ URL): they reach the
        child through PYTEST_ADDOPTS in its environment, which only its owner can read, never on
        its command line, which every local account sees (ps, WMI's Win32_Process)."""
        return [a for a in self.args if _holds_secret(a)]


def _holds_secret(arg: str) -> bool:
    return redact(arg) != arg


def child_env(request: SpecRequest) -> dict[str, str]:
    """The spec's environment: our package importable even when k4w is not pip-installed, and the
    private target options in PYTEST_ADDOPTS (pytest reads them before the command line)."""
    pythonpath = os.pathsep.join(filter(None, [str(sources.REPO.root), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": pythonpath}
    private = request.private_args()
    if private:
        env["PYTEST_ADDOPTS"] = " ".join(filter(None, [os.environ.get("PYTEST_ADDOPTS"), shlex.join(private)]))
    return env


def result_from_stats(stats: dict, deselected: list, exit_status: int) -> dict:
    """Counts from pytest's terminal statistics (what its last line says)."""
    def count(key: str) -> int:
        return len(stats.get(key, []))

    failed_ids = sorted({r.nodeid for key in ("failed", "error") for r in stats.get(key, [])})
    return {
        "passed": count("passed"),
        "failed": count("failed"),
        "errors": count("error"),
        "skipped": count("skipped"),
        "xfailed": count("xfailed"),
        "xpassed": count("xpassed"),
        "deselected": [{"test": nodeid, "check": check, "reason": reason} for nodeid, check, reason in deselected],
        "failed_tests": failed_ids,
        "expected_failures": [{"test": r.nodeid, "reason": getattr(r, "wasxfail", "")} for r in stats.get("xfailed", [])],
        "exit_status": exit_status,
    }


def run(request: SpecRequest, runner) -> dict:
    """Run the spec through a k4w.infra.proc.Runner; return its result document ({} in a dry run)."""
    if runner.dry_run:
        private = request.private_args()
        runner.show(request.command() + ([f"(and in PYTEST_ADDOPTS: {redact(shlex.join(private))})"] if private else []),
                    cwd=sources.REPO.root)
        return {}
    request.junit.parent.mkdir(parents=True, exist_ok=True)
    request.result.unlink(missing_ok=True)
    code, tail = runner.run(request.command(), cwd=sources.REPO.root, env=child_env(request), check=False)
    result = json.loads(request.result.read_text(encoding="utf-8")) if request.result.is_file() else None
    if result is None or result["exit_status"] in NOT_RUN:
        # pytest stopped before running the checks (usage error, crash, interrupt): nothing ran.
        lines = [line for line in tail.strip().splitlines() if line.strip()]
        # The spec's own word on why it stopped (its result file) beats guessing from output.
        last = [result["usage_error"]] if result and result.get("usage_error") else lines[-3:]
        raise K4wError(
            f"{request.suite}: pytest exited {code} ({EXIT_MEANING.get(code, 'unknown')}) without running the spec"
            + (": " + " / ".join(last) if last else "")
        )
    result["junit"] = str(request.junit)
    result["exit_meaning"] = EXIT_MEANING.get(result["exit_status"], "unknown")
    return result


def outcome(result: dict) -> str:
    """passed only when something ran and nothing failed."""
    ran = result["passed"] + result["failed"] + result["errors"] + result["xfailed"] + result["xpassed"]
    bad = result["failed"] + result["errors"] + result["skipped"]
    return "passed" if ran and not bad and result["exit_status"] == 0 else "failed"
