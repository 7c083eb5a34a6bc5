"""The build media: the verified component files of one box, where Packer hands them to its guest.

`build-*` fills the host cache first (k4w.bake.fetch), then places each file the box needs in
OUT/http/<box>/components/, named `<component>-<file name>` (media_name). The guest installs
from there and never downloads a component itself:

- Windows reads them from the build CD: the template's cd_files takes that folder's files (a
  glob) onto the Gen2/Gen1 CD beside Autounattend.xml. A CD needs no network, so no Windows
  Firewall rule on the host and no proxy exception in the guest, and reads at disk speed; WinRM's
  file upload would move a few hundred MB in base64 SOAP chunks, which takes tens of minutes.
- Ubuntu fetches them from Packer's HTTP server, whose http_directory is OUT/http/<box>/: the
  preseed already comes from there (so the firewall rule of k4w.render.packer_http already admits it),
  curl is in the installed system, and no step has to find and mount a second CD.

The names are flat because cd_files puts every listed file at the CD's root. Joliet, the file
system Windows reads on a CD made by oscdimg or xorriso, allows 64 characters per name.
"""

from __future__ import annotations

import os
import re
import shutil
import urllib.parse
from pathlib import Path, PurePosixPath

from k4w.infra.errors import K4wError
from k4w.model.profiles import Profile

FOLDER = "components"
# ECMA-119 Joliet extension: at most 64 UCS-2 characters per file name.
JOLIET_NAME_MAX = 64
# The largest file a build CD holds. Packer's cd_files runs `xorriso -as genisoimage -rock -joliet` or
# `oscdimg -j1 -o -m` (packer-plugin-sdk v0.3.0 and v0.3.2, the SDKs of the pinned hyperv v1.0.4 and qemu
# v1.0.9 plugins: multistep/commonsteps/step_create_cdrom.go), neither at ISO level 3 nor UDF, so a file
# is one extent. Measured with Debian's xorriso 1.5.4 and those flags: 4 GiB - 1 bytes written, 4 GiB
# refused ("A file is bigger than supported by used standard").
CD_FILE_MAX = 4 * 1024 ** 3 - 1
# What a path segment may hold: a component name, a version or a URL's file name reach the file
# system (here and in the host cache), so anything else (a separator, a drive colon, '..') becomes '_'.
_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]")


def safe_segment(segment: str) -> str:
    segment = _UNSAFE.sub("_", segment)
    return "_" if segment in ("", ".", "..") else segment


def file_name(url: str) -> str:
    """The last segment of a URL's path, made safe for a file system."""
    name = urllib.parse.unquote(PurePosixPath(urllib.parse.urlsplit(url).path).name)
    return safe_segment(name or "download")


def media_name(component: str, url: str, media_file: str | None = None) -> str:
    """Where the guest finds a component: OUT/http/<box>/components/<this>. media_file (the
    component's `media_file` key) replaces the URL's file name where that is too long for a CD:
    the Update Catalog's names end in a 40-digit hex digest."""
    return f"{component}-{safe_segment(media_file) if media_file else file_name(url)}"


def box_files(profile: Profile) -> dict[str, str]:
    """{component: media name} of every component this box downloads (those with a url)."""
    names = {}
    for component, spec in (profile.data.get("components") or {}).items():
        if spec.get("url"):
            names[component] = media_name(component, str(spec["url"]), spec.get("media_file"))
    return names


def cd_name_problems(profile: Profile) -> list[str]:
    """Names too long for the build CD (Windows boxes)."""
    found = []
    for component, name in box_files(profile).items():
        if len(name) > JOLIET_NAME_MAX:
            found.append(f"{profile.path.name}: components.{component}: its build-media name {name!r} has {len(name)} "
                         f"characters; a CD's Joliet names hold {JOLIET_NAME_MAX} (give the component a shorter media_file)")
    return found


def cd_file_problems(paths: list[Path]) -> list[str]:
    """The staged files a build CD cannot carry as they are: a name longer than Joliet's, or 4 GiB or more.
    Checked on the folder itself, so it holds for whatever is staged there (components, image archives)."""
    found = []
    for path in sorted(paths):
        if len(path.name) > JOLIET_NAME_MAX:
            found.append(f"{path.name}: {len(path.name)} characters; a CD's Joliet names hold {JOLIET_NAME_MAX}")
        if path.stat().st_size > CD_FILE_MAX:
            found.append(f"{path.name}: {path.stat().st_size} bytes; a file on the build CD is below 4 GiB "
                         f"({CD_FILE_MAX} bytes at most)")
    return found


def delivery(profile: Profile) -> str:
    """How a box's guest gets these files (the module docstring says why)."""
    return "the build CD" if profile.is_windows else "Packer's HTTP server"


# The installers that fetch their answer file over HTTP from beside the build media: debian-installer
# (preseed/url=http://<Packer's HTTP server>/preseed.cfg on the boot line).
ANSWER_FILE_OVER_HTTP = ("preseed",)


def served_folder(out: Path, profile: Profile) -> Path:
    """What Packer's HTTP server serves for an Ubuntu-family box: OUT/http/<box>/ where the installer
    fetches its answer file from there, else the build media folder alone. So a seed that holds the
    proxy's credentials and reaches its guest on a CD (autoinstall's user-data on the cidata CD) is
    never served on the network, where the port range's firewall rule admits the host's LAN."""
    box_folder = folder(out, profile.name)
    return box_folder.parent if _serves_answer_file(profile) else box_folder


def url_path(profile: Profile) -> str:
    """The path of the build media under Packer's HTTP server (k4w_component_file in lib.sh)."""
    return f"/{FOLDER}/" if _serves_answer_file(profile) else "/"


def _serves_answer_file(profile: Profile) -> bool:
    return profile.installer_kind in ANSWER_FILE_OVER_HTTP


def folder(out: Path, box: str) -> Path:
    return Path(out) / "http" / box / FOLDER


def stage(out: Path, profile: Profile, files: dict[str, Path]) -> list[Path]:
    """Make OUT/http/<box>/components/ hold exactly this box's verified files; returns them.

    files: {component: verified file in the host cache} (fetch.ensure's answer for this box).
    Each is hard-linked when the cache shares the volume (instant, no second copy of hundreds
    of MB), else copied. Anything else in the folder goes: the CD takes the whole folder.
    """
    names = box_files(profile)
    missing = sorted(set(names) - set(files))
    if missing:
        raise K4wError(f"{profile.name}: no verified file in the cache for {', '.join(missing)}; run `invoke fetch --box {profile.name}`")
    target = folder(out, profile.name)
    if target.is_symlink():
        raise K4wError(f"{target} is a symbolic link; k4w never writes through a link inside --out. Remove it and run again.")
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    staged = []
    for component, name in names.items():
        dest = target / name
        try:
            os.link(files[component], dest)
        except OSError:  # another volume, or a file system without hard links
            shutil.copyfile(files[component], dest)
        staged.append(dest)
    return staged
