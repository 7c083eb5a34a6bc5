"""kubectl as a subprocess against build/kubeconfig: small, explicit, no client library.

Waiting is always for a condition with a deadline and a message naming what was awaited
and the last state seen - never a fixed sleep.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TypeVar

from ..errors import K4wError, ToolMissing
from ..tools import INSTALL
from ..redact import redact

POLL_SECONDS = 3  # between two looks at a condition; the deadline is what bounds the wait

T = TypeVar("T")


class KubectlError(RuntimeError):
    """kubectl itself failed (API unreachable, object missing, bad request)."""


@dataclass
class Kubectl:
    kubeconfig: Path
    binary: str = "kubectl"
    request_timeout: int = 60

    def __post_init__(self):
        found = shutil.which(self.binary)
        if not found:
            raise ToolMissing(self.binary, INSTALL["kubectl"])
        self.binary = found
        if not Path(self.kubeconfig).is_file():
            raise K4wError(f"no kubeconfig at {self.kubeconfig}: run `invoke cluster-up` first")

    def argv(self, *args: str) -> list[str]:
        return [self.binary, f"--kubeconfig={self.kubeconfig}", *args]

    def run(self, *args: str, stdin: str | None = None, timeout: int | None = None, check: bool = True):
        try:
            proc = subprocess.run(
                self.argv(*args),
                input=stdin,
                capture_output=True,
                text=True,
                timeout=timeout or self.request_timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise KubectlError(f"kubectl {' '.join(args[:3])} did not finish within {timeout or self.request_timeout} s") from None
        if check and proc.returncode != 0:
            raise KubectlError(redact(f"kubectl {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()}"))
        return proc

    def get(self, *args: str) -> dict:
        return json.loads(self.run("get", *args, "-o", "json").stdout)

    def items(self, *args: str) -> list[dict]:
        return self.get(*args).get("items", [])

    def apply(self, objects: list[dict]) -> None:
        # --validate=false: a newer kubectl's client-side schema need not match a 1.11 server;
        # the server still validates every object.
        document = json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
        self.run("apply", "--validate=false", "-f", "-", stdin=document)

    def apply_file(self, path: Path) -> None:
        self.run("apply", "--validate=false", "-f", str(path))

    def exec(self, namespace: str, pod: str, command: list[str], timeout: int = 120):
        """Run a command in a pod; the CompletedProcess carries the command's own exit code."""
        return self.run("exec", "-n", namespace, pod, "--", *command, timeout=timeout, check=False)


def wait_for(check: Callable[[], tuple[bool, T]], timeout: float, what: str, clock=time.monotonic, sleep=time.sleep) -> T:
    """Poll `check` (-> (done, state)) until done or the deadline; the error shows the last state."""
    deadline = clock() + timeout
    while True:
        done, state = check()
        if done:
            return state
        if clock() >= deadline:
            raise TimeoutError(redact(f"timed out after {timeout:.0f} s waiting for {what}; last seen: {state}"))
        sleep(POLL_SECONDS)


def pod_ready(pod: dict) -> bool:
    conditions = pod.get("status", {}).get("conditions", [])
    return pod.get("status", {}).get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in conditions
    )


def pod_state(pod: dict) -> str:
    """One line on why a pod is not ready: phase plus each waiting/terminated container reason."""
    status = pod.get("status", {})
    parts = [f"{pod['metadata']['name']}: {status.get('phase', '?')}"]
    for cs in status.get("containerStatuses", []) or []:
        for kind, detail in (cs.get("state") or {}).items():
            if kind != "running":
                parts.append(f"{cs['name']} {kind} {detail.get('reason', '')} {detail.get('message', '')}".strip())
    if not status.get("containerStatuses"):
        for cond in status.get("conditions", []) or []:
            if cond.get("status") != "True" and cond.get("message"):
                parts.append(cond["message"])
    return "; ".join(parts)


def node_ready(node: dict) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in node.get("status", {}).get("conditions", [])
    )
