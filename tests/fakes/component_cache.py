"""A STAND-IN host component cache, for builds with the fake packer (tests/fakes/packer.py).

build-* fetches every box download into the host cache before Packer starts. Tests cannot reach
dl.k8s.io or GitHub, and the fake packer never looks inside the files, so this writes a small
placeholder for each download and an index.json entry that CLAIMS the file was verified against
the profile's checksum. k4w.bake.cache trusts an entry whose size, mtime and URL still match (as
the ISO hash cache does), so the build proceeds to stage the placeholders; a real guest would
reject every one of them. Never use this where a real guest runs (the e2e run uses real files:
ci/e2e/mirror.py).
"""

from __future__ import annotations

from pathlib import Path

from k4w.bake import cache
from k4w.infra.download import Downloaded
from k4w.derive.cluster import Cluster


def placeholder(url: str) -> bytes:
    return f"k4w test placeholder for {url}; not the real file\n".encode()


def seed(root: Path, cluster: Cluster, boxes: list[str] | None = None) -> list[Path]:
    """Fill root with a claimed-verified placeholder for every download of these boxes that has a
    checksum (a component without one stays missing, as on a real host)."""
    manifest = cache.Manifest(root)
    written = []
    for item in cache.plan(cluster, boxes):
        if item.checksum is None or item.checksum.key not in ("sha256", "sha512"):
            continue
        path = item.path(root)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(placeholder(item.url))
        claimed = {"sha256": None, "sha512": None, item.checksum.key: item.checksum.value.lower()}
        manifest.record(item, Downloaded(path, path.stat().st_size, claimed["sha256"], claimed["sha512"], 0))
        written.append(path)
    return written


def seeded_env(folder: Path, config_file: Path) -> dict[str, str]:
    """The environment for a real `invoke build-*` run on config_file whose downloads are already
    'in the cache' (placeholders, see above): K4W_CACHE pointing at a seeded folder."""
    from k4w.model import config

    seed(folder, Cluster.resolve(config.load(config_file)))
    return {"K4W_CACHE": str(folder)}
