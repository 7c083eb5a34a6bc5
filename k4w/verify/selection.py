"""Which spec checks run: deselection by profile data (`skip_checks`) and by stage, with reasons.

A deselected check is reported as deselected, with its reason, in the summary and in the
result file - never as passed and never as skipped. Unknown check names in a profile are an
error, so a typo cannot silently switch nothing (or everything) off.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from k4w.infra.errors import K4wError
from k4w.model.profiles import Profile

# box: a freshly booted throwaway VM from the built box, nothing joined.
# node: the same box as a cluster node after cluster-up (services started, keys replaced).
STAGES = ("box", "node")

STAGE_REASONS = {
    "box": "only true on a freshly built box, before cluster-up joins it",
    "node": "only true once cluster-up has joined the node",
}


@dataclass(frozen=True)
class Check:
    name: str
    stage: str | None = None  # None: holds at every stage
    # The profile component the check is about (e.g. docker, containerd): a box whose profile pins
    # no such component is of another era, and the check does not apply to it.
    component: str | None = None


def skip_checks(profile: Profile) -> dict[str, str]:
    """`skip_checks: {check: reason}` from a profile; every reason must say why."""
    raw = profile.data.get("skip_checks") or {}
    if not isinstance(raw, dict):
        raise K4wError(f"{profile.path}: skip_checks must map a check name to the reason it is switched off")
    out = {}
    for name, reason in raw.items():
        if not isinstance(reason, str) or not reason.strip():
            raise K4wError(f"{profile.path}: skip_checks.{name} needs a reason (a non-empty string)")
        out[str(name)] = reason.strip()
    return out


def deselection_reasons(checks: list[Check], skips: dict[str, str], stage: str, origin: str,
                        components: Collection[str] | None = None) -> list[str | None]:
    """For each check, why it is deselected (None: it runs). Raises on unknown skip names.
    components: the box profile's components (None: not a box spec, no check needs one)."""
    if stage not in STAGES:
        raise K4wError(f"unknown stage '{stage}' (one of: {', '.join(STAGES)})")
    known = {c.name for c in checks}
    unknown = sorted(set(skips) - known)
    if unknown:
        raise K4wError(
            f"{origin}: skip_checks names no check of this spec: {', '.join(unknown)} "
            f"(checks: {', '.join(sorted(known))})"
        )
    reasons: list[str | None] = []
    for check in checks:
        if check.name in skips:
            reasons.append(f"{origin}: {skips[check.name]}")
        elif check.stage not in (None, stage):
            reasons.append(f"stage {stage}: {STAGE_REASONS[check.stage]}")
        elif check.component and components is not None and check.component not in components:
            reasons.append(f"the profile pins no components.{check.component}: this box's era has none")
        else:
            reasons.append(None)
    return reasons
