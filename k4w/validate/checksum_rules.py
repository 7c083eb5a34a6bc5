"""Every checksum in a box profile names its source, and none is read from a file upstream never
published.

A checksum fetched at build time from a URL beside the download (sha256_url) is only as good as
the claim that upstream publishes that file for that version; dl.k8s.io published none for 1.11,
so such a build stopped on a 404. facts/published-checksums.yml lists the checksum files known to
exist, each with its source; any other sha256_url is refused.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from pathlib import Path

import yaml

from k4w.derive.cluster import Cluster
from k4w.model.profiles import CHECKSUM_KEYS
from k4w.validate.result import Result
from k4w.validate.result import from_check

FACTS = Path(__file__).resolve().parent / "facts" / "published-checksums.yml"


def published_patterns() -> list[re.Pattern]:
    data = yaml.safe_load(FACTS.read_text(encoding="utf-8")) or {}
    return [re.compile(entry["pattern"]) for entry in data.get("published") or []]


def check(cluster: Cluster) -> tuple[list[str], list[str]]:
    """(profiles checked, problems)."""
    checked, problems = [], []
    patterns = published_patterns()
    for name, profile in cluster.profiles.items():
        where = profile.path.name
        checked.append(where)
        iso = profile.data.get("iso") or {}
        if iso.get("sha256") and not iso.get("sha256_source"):
            problems.append(f"{where}: iso.sha256 names no source (add iso.sha256_source)")
        for component, spec in (profile.data.get("components") or {}).items():
            if not spec.get("url"):
                continue
            if any(spec.get(k) for k in CHECKSUM_KEYS) and not spec.get("checksum_source"):
                problems.append(f"{where}: components.{component} has a checksum that names no source "
                                f"(add components.{component}.checksum_source)")
            url = spec.get("sha256_url")
            if url and not any(p.fullmatch(url) for p in patterns):
                problems.append(f"{where}: components.{component}.sha256_url {url} is not a checksum file upstream is known "
                                f"to publish (k4w/validate/facts/published-checksums.yml); pin the value with its source instead")
    return checked, problems


# ------------------------------------------------------------------ the validator (k4w.validate.VALIDATORS)


def run(cluster: Cluster, out: Path) -> Result:
    return from_check("box profile checksums", "sources and published-checksum facts", check(cluster))


def would_run(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    return ["# in this process: every profile checksum names its source; no unpublished checksum file is used"]
