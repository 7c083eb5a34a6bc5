"""What the run's downloads.mirror serves for a CI box, by era (the profile's `ci_downloads`):

  real-binaries    the containerd era (ubuntu-2404-e2e): the real containerd, runc, CNI plugins and
                   Kubernetes node binaries from the pinned tool cache (release_files.py); their
                   digests reach the build as the run's pins (k4w-pins.yml); no stand-in.
  seed-stand-ins   the seed era (debian-12-e2e, Kubernetes 1.11): CI stand-ins (seed_stand_ins.py),
                   whose digests the profile pins; current Go cannot build that era's binaries.

The report names what was a stand-in (report.json `stand_ins`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

from k4w.model import pins as pins_mod
from k4w.model.profiles import Profile
from . import release_files, seed_stand_ins
from .phases import E2EError

REAL = "real-binaries"
SEED = "seed-stand-ins"


@dataclass
class MirrorFiles:
    paths: dict[str, bytes]  # mirror path (/<host>/<path>) -> body
    stand_ins: list[str]  # components served as stand-ins, sorted
    pins: dict = field(default_factory=dict)  # the k4w-pins.yml document the run writes (empty: none)
    digests: dict[str, str] = field(default_factory=dict)  # component -> sha256 of what is served

    def note(self, url: str) -> str:
        what = f"CI stand-ins of {', '.join(self.stand_ins)}" if self.stand_ins else \
            f"real binaries ({', '.join(sorted(self.digests))}) from the pinned tool cache"
        return f"{len(self.paths)} files at {url}: {what}"


def era(profile: Profile) -> str:
    kind = profile.data.get("ci_downloads")
    if kind not in (REAL, SEED):
        raise E2EError(f"{profile.path.name}: ci_downloads must be {REAL} or {SEED}, not {kind!r}")
    return kind


def mirror_paths(files: dict[str, bytes]) -> dict[str, bytes]:
    """Files by URL at their downloads.mirror places (<mirror>/<host>/<path>, k4w.bake.cache.mirror_url)."""
    return {f"/{urlsplit(url).hostname}{urlsplit(url).path}": body for url, body in files.items()}


def for_profile(profile: Profile, when: str) -> MirrorFiles:
    components = profile.data.get("components") or {}
    if era(profile) == SEED:
        files = seed_stand_ins.for_profile(components)
        served = sorted(name for name, spec in components.items() if str(spec.get("url")) in files)
        return MirrorFiles(mirror_paths(files), stand_ins=served)
    pinned_by_profile = sorted(name for name, spec in components.items() if any(spec.get(k) for k in pins_mod.GUEST_KEYS))
    if pinned_by_profile:
        # A digest in the profile would be checked instead of the build's, and could only be stale.
        raise E2EError(f"{profile.path.name}: components {', '.join(pinned_by_profile)} pin a digest, but this CI box's "
                       "files are built from the tool cache: their digests come from that build (the run's k4w-pins.yml)")
    packed = release_files.for_profile(components)
    return MirrorFiles(mirror_paths({p.url: p.body for p in packed.values()}), stand_ins=[],
                       pins=release_files.pins(profile.name, packed, when),
                       digests={name: p.sha256 for name, p in packed.items()})


def describe(profile: Profile) -> str:
    """For a dry run: what would be served, without packing anything."""
    components = profile.data.get("components") or {}
    urls = ", ".join(str(spec["url"]) for spec in components.values() if spec.get("url"))
    if era(profile) == SEED:
        return f"CI stand-ins (ci/e2e/seed_stand_ins.py): {urls}"
    tools = ", ".join(sorted({release_files.RELEASES[n].tool for n in components if n in release_files.RELEASES}))
    return (f"real binaries from the pinned tool cache ({tools}; ci/e2e/release_files.py), "
            f"their sha256 handed to the build in <tmp>/k4w-pins.yml: {urls}")
