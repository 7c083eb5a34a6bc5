"""Whether this host can run Hyper-V: the check `invoke doctor` prints and the build gate refuses on.

Below the stages (infra), so that the build gate (k4w.bake.gate) asks it without importing the
doctor command, which imports the bake package itself.
"""

from __future__ import annotations

import ctypes
import os
import platform
from dataclasses import dataclass

from k4w.infra import proc

STAGES = ("validate", "build", "cluster")


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    stages: tuple[str, ...] = STAGES

    def required_for(self, stage: str) -> bool:
        return stage in self.stages


def _powershell(script: str) -> tuple[int, str]:
    result = proc.run(["powershell.exe", "-NoProfile", "-NonInteractive", "-Command", script], timeout=60)
    return result.returncode, result.output.strip()


# Test-only stand-in (docs/verification.md): the orchestration tests run `invoke build-*` on
# Linux against the fake packer (tests/fakes/packer.py), which needs no Hyper-V. Set to 1, the
# host counts as a ready Hyper-V host. On a real host it only lets Packer start and fail with
# "Failed creating Hyper-V driver".
FAKE_HYPERV_HOST_ENV = "K4W_TEST_FAKE_HYPERV_HOST"


def _is_windows() -> bool:
    return platform.system() == "Windows"


def host_checks() -> list[Check]:
    """Whether this host can run Hyper-V: Windows, Hyper-V enabled, an elevated terminal."""
    if os.environ.get(FAKE_HYPERV_HOST_ENV) == "1":
        return [Check("Hyper-V host", True, f"test stand-in ({FAKE_HYPERV_HOST_ENV}=1): not checked", stages=("build", "cluster"))]
    if not _is_windows():
        return [Check("Hyper-V host", False, f"this is {platform.system()}, not Windows: boxes and the cluster cannot be built here",
                      "run build and cluster tasks on a Windows 10/11 host with Hyper-V; render, validate and plan work anywhere",
                      stages=("build", "cluster"))]
    checks = []
    is_admin = bool(ctypes.windll.shell32.IsUserAnAdmin())  # type: ignore[attr-defined]
    checks.append(Check("Administrator rights", is_admin, "elevated" if is_admin else "not elevated",
                        "start the terminal with 'Run as administrator' (Hyper-V cmdlets need it)", stages=("build", "cluster")))
    code, out = _powershell("(Get-WindowsOptionalFeature -Online -FeatureName Microsoft-Hyper-V-All).State")
    checks.append(Check("Hyper-V enabled", code == 0 and "Enabled" in out, out or f"exit {code}",
                        "Enable-WindowsOptionalFeature -Online -FeatureName Microsoft-Hyper-V -All, then reboot",
                        stages=("build", "cluster")))
    return checks
