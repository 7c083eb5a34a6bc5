"""kubectl as a subprocess against build/kubeconfig: small, explicit, no client library.

Waiting is always for a condition with a deadline (k4w.infra.proc.wait_for), whose message names
what was awaited and the last state seen - never a fixed sleep.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from k4w.infra import proc, tools
from k4w.infra.errors import K4wError
from k4w.infra.redact import redact


class KubectlError(RuntimeError):
    """kubectl itself failed (API unreachable, object missing, bad request)."""


@dataclass
class Kubectl:
    kubeconfig: Path
    binary: str = "kubectl"
    request_timeout: int = 60

    def __post_init__(self):
        self.binary = tools.require(self.binary)
        if not Path(self.kubeconfig).is_file():
            raise K4wError(f"no kubeconfig at {self.kubeconfig}: run `invoke cluster-up` first")

    def argv(self, *args: str) -> list[str]:
        return [self.binary, f"--kubeconfig={self.kubeconfig}", *args]

    def run(self, *args: str, stdin: str | None = None, timeout: int | None = None, check: bool = True) -> proc.Result:
        try:
            result = proc.run(self.argv(*args), input=stdin, timeout=timeout or self.request_timeout)
        except proc.TimedOut:
            raise KubectlError(f"kubectl {' '.join(args[:3])} did not finish within {timeout or self.request_timeout} s") from None
        if check and result.returncode != 0:
            raise KubectlError(redact(f"kubectl {' '.join(args)} exited {result.returncode}: {result.stderr.strip()}"))
        return result

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
