"""Box profiles: one YAML file per box in packer/, pinning every version and source.

A profile is data. Templates and guest scripts read it; no version is typed anywhere else.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from . import ROOT
from .errors import K4wError

PROFILE_DIR = ROOT / "packer"

# Keys every profile must carry, because config validation and rendering depend on them.
REQUIRED = ("name", "os_family", "node_os", "min_memory_mb", "supports_vxlan", "kubernetes")


class Attr(dict):
    """A dict whose keys read as attributes, so templates can write box.docker.version."""

    def __getattr__(self, key: str) -> Any:
        try:
            value = self[key]
        except KeyError as exc:
            raise AttributeError(f"profile has no key '{key}'") from exc
        return value

    @classmethod
    def wrap(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return cls({k: cls.wrap(v) for k, v in value.items()})
        if isinstance(value, list):
            return [cls.wrap(v) for v in value]
        return value


@dataclass(frozen=True)
class Profile:
    name: str
    path: Path
    data: Attr

    @property
    def os_family(self) -> str:
        return self.data.os_family

    @property
    def is_windows(self) -> bool:
        return self.data.node_os == "windows"


def available() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yml"))


def load(name: str) -> Profile:
    # Read PROFILE_DIR at call time so tests can point it at a variant (e.g. a Gen1 profile).
    return _load(name, PROFILE_DIR)


@lru_cache(maxsize=None)
def _load(name: str, profile_dir: Path) -> Profile:
    path = profile_dir / f"{name}.yml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in profile_dir.glob("*.yml"))) or "none"
        raise K4wError(f"unknown box '{name}': no profile {path} (known boxes: {known})")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise K4wError(f"{path}: not valid YAML: {exc}") from exc
    missing = [k for k in REQUIRED if k not in (raw or {})]
    if missing:
        raise K4wError(f"{path}: missing keys {', '.join(missing)}")
    if raw["name"] != name:
        raise K4wError(f"{path}: 'name' is {raw['name']!r}, expected {name!r} (the file name)")
    return Profile(name=name, path=path, data=Attr.wrap(raw))


# Any one of these proves a download is the file we meant (DESIGN: every download is checksum-verified).
CHECKSUM_KEYS = ("sha256", "sha256_url", "sha512")


def unpinned_components(profile: Profile) -> list[str]:
    """Components a build would download without a way to verify them; each message names the key."""
    return [
        f"{profile.path.name}: components.{name} ({component.get('version', '?')}) has no {', '.join(CHECKSUM_KEYS)}; "
        f"pin a verified value before building"
        for name, component in (profile.data.get("components") or {}).items()
        if component.get("url") and not any(component.get(k) for k in CHECKSUM_KEYS)
    ]
