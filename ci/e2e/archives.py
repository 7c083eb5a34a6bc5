"""Reproducible release archives: the same members always give the same bytes.

Fixed times, owners, modes and order, and gzip without a time stamp or file name, so a profile can
pin a stand-in's digest (seed_stand_ins.py), and a rebuild of the same tool binaries gives the same
digest in the run's pins (release_files.py).
"""

from __future__ import annotations

import gzip
import io
import tarfile

# gzip's own default level (gzip(1) -6), the one the upstream release scripts get from `tar -czf`.
GZIP_LEVEL = 6


def tar_gz(members: dict[str, bytes], level: int = GZIP_LEVEL) -> bytes:
    """A .tar.gz of members (path -> content, every one an executable, mode 0755, owned by root),
    with an entry for each folder above them first, as `tar -czf X.tar.gz -C DIR bin` writes.
    level: the seed era's stand-ins keep 9, the level their pinned digests were taken with."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        folders = sorted({"/".join(path.split("/")[:i]) for path in members for i in range(1, path.count("/") + 1)})
        for folder in folders:
            info = tarfile.TarInfo(folder)
            info.type, info.mode, info.mtime, info.uname, info.gname = tarfile.DIRTYPE, 0o755, 0, "root", "root"
            tar.addfile(info)
        for path in sorted(members):
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime, info.uname, info.gname = len(members[path]), 0o755, 0, "root", "root"
            tar.addfile(info, io.BytesIO(members[path]))
    packed = io.BytesIO()
    with gzip.GzipFile(fileobj=packed, mode="wb", compresslevel=level, mtime=0, filename="") as gz:
        gz.write(raw.getvalue())
    return packed.getvalue()
