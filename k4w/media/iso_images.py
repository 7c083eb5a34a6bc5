"""What a Windows installation ISO holds, and whether Setup can install the profile's image from
it without stopping.

Setup gives no error for two mistakes: an answer file that selects an image the media lack (or
the wrong one), and media that need a product key while the answer file has none. Either way
Setup stops on a page and Packer waits for WinRM for hours. Before a build, in `invoke iso-add`
and in `invoke doctor`, this module reads the ISO's image list and refuses those cases, naming the
ISO, the image and what to set in the box profile.

The image list is data (Media), read in one of two ways:
- on a Windows host, host/iso-images.ps1 (Mount-DiskImage, Get-WindowsImage) prints it as JSON;
- K4W_ISO_IMAGES_FIXTURE names a recorded JSON file instead: a test stand-in
  (docs/verification.md), so the decision can be shown on hosts that cannot mount an ISO.
The decision (check) takes that data and the profile, nothing else.
"""

from __future__ import annotations

import json
import os
import platform
import re
from dataclasses import dataclass
from pathlib import Path

from k4w.infra import proc
from k4w.infra import sources
from k4w.media.iso import IsoError, _rel
from k4w.model.profiles import Profile

SCRIPT = "iso-images.ps1"
FIXTURE_ENV = "K4W_ISO_IMAGES_FIXTURE"
# Mounting an ISO and reading its WIM headers takes seconds; a cold disk or an antivirus scan of
# the mounted volume can take minutes.
SCRIPT_TIMEOUT = 600
RUN_ON_HOST = "reading an ISO's images needs Windows (Mount-DiskImage, Get-WindowsImage): it runs on the Hyper-V host"


class ImagesUnavailable(IsoError):
    """The image list could not be read (not Windows, not elevated, not installation media)."""


class ImagesRefused(IsoError):
    """The ISO's images do not fit the box profile: Setup would stop."""


@dataclass(frozen=True)
class Image:
    index: int
    name: str  # Get-WindowsImage's ImageName: the image's DISPLAYNAME when it has one
    description: str
    edition_id: str | None
    installation_type: str | None
    # The <NAME> in the image file's XML data, which Setup's /IMAGE/NAME matches (host/iso-images.ps1
    # reads it); None when it could not be read, or in a list recorded before it was.
    wim_name: str | None = None

    @property
    def setup_name(self) -> str:
        """The name an answer file selects this image by."""
        return self.wim_name or self.name

    def describe(self) -> str:
        shown = f" (listed as '{self.name}')" if self.wim_name and self.wim_name != self.name else ""
        return (f"image {self.index} '{self.setup_name}'{shown} ({self.edition_id or 'edition unknown'}, "
                f"{self.installation_type or 'type unknown'})")


@dataclass(frozen=True)
class Media:
    images: tuple[Image, ...]
    label: str | None  # the ISO's volume label
    ei_cfg: str | None  # the text of sources\ei.cfg, when the media carry one
    image_file: str  # sources\install.wim or sources\install.esd
    origin: str  # where the list came from, for messages
    wim_names_error: str | None = None  # why the host script could not read the images' NAMEs

    def listing(self) -> str:
        return "; ".join(image.describe() for image in self.images)


def parse(data, origin: str) -> Media:
    """Media from host/iso-images.ps1's JSON (or a recorded copy); a malformed list names its origin."""
    def bad(why: str) -> ImagesUnavailable:
        return ImagesUnavailable(f"the image list from {origin} is not usable: {why}")

    if not isinstance(data, dict) or not isinstance(data.get("images"), list) or not data["images"]:
        raise bad("expected an object with a non-empty 'images' list")
    images = []
    for number, entry in enumerate(data["images"], 1):
        if not isinstance(entry, dict) or not isinstance(entry.get("index"), int) or not isinstance(entry.get("name"), str):
            raise bad(f"entry {number} needs an integer 'index' and a string 'name'")
        if entry.get("wim_name") is not None and not isinstance(entry["wim_name"], str):
            raise bad(f"entry {number} has a 'wim_name' that is not a string")
        images.append(Image(entry["index"], entry["name"], str(entry.get("description") or ""),
                            entry.get("edition_id") or None, entry.get("installation_type") or None,
                            entry.get("wim_name") or None))
    return Media(tuple(images), data.get("label") or None, data.get("ei_cfg") or None,
                 str(data.get("image_file") or "sources\\install.wim"), origin, data.get("wim_names_error") or None)


def script_command(iso_path: Path) -> list[str]:
    return ["powershell.exe", "-NoProfile", "-NonInteractive", "-ExecutionPolicy", "Bypass",
            "-File", str(sources.REPO.host / SCRIPT), "-IsoPath", str(iso_path)]


def read_media(iso_path: Path) -> Media:
    """The images of the ISO at iso_path: from the recorded stand-in if one is set, else from the ISO itself."""
    fixture = os.environ.get(FIXTURE_ENV)
    if fixture:
        origin = f"{fixture}, a recorded image list ({FIXTURE_ENV}, a test stand-in: {iso_path} itself was not read)"
        try:
            return parse(json.loads(Path(fixture).read_text(encoding="utf-8")), origin)
        except (OSError, json.JSONDecodeError) as exc:
            raise ImagesUnavailable(f"{FIXTURE_ENV}={fixture}: {exc}") from exc
    if platform.system() != "Windows":
        raise ImagesUnavailable(f"{iso_path}: {RUN_ON_HOST}")
    result = proc.run(script_command(iso_path), timeout=SCRIPT_TIMEOUT)
    origin = f"host/{SCRIPT} on {iso_path}"
    if result.returncode != 0:
        raise ImagesUnavailable(f"host/{SCRIPT} could not list the images of {iso_path} (exit {result.returncode}):\n"
                                f"{proc.tail(result.output)}\n  Mount-DiskImage and Get-WindowsImage need an elevated shell "
                                f"('Run as administrator').")
    try:
        return parse(json.loads(result.stdout), origin)
    except json.JSONDecodeError as exc:
        raise ImagesUnavailable(f"{origin} printed no JSON ({exc}):\n{proc.tail(result.output)}") from exc


# ------------------------------------------------------------------ the channel: does Setup need a key?
#
# Volume-licence (VL) and evaluation media install without a product key; retail, OEM and MSDN
# (Visual Studio subscription) media stop on the key page unless the answer file has one. The
# media's channel is read from, in this order, the first that says something:
# 1. the image's EditionId: evaluation editions end in "Eval" (ServerDatacenterEval,
#    ServerStandardEvalCor, ...). A non-evaluation key does not fit them, so a key is refused too.
# 2. sources\ei.cfg, which Microsoft's media use to mark their channel: [VL] 1 = volume licence,
#    [Channel] Retail or OEM with [VL] 0 = retail (Microsoft, "Windows Setup Edition Configuration
#    and Product ID Files (EI.cfg and PID.txt)"). PID.txt is not evidence: Setup ignores both files
#    when it runs from an answer file (same page), so only what they say about the media counts.
# 3. the volume label: Microsoft's build labels end the architecture with FRE (free build) plus V
#    for volume licence or E for evaluation, nothing for retail/OEM. Their own download names pair
#    them: ..._X64FRE_SERVER_EN-US_VL-IR5_SSS_X64FREV_EN-US_DV9.ISO (Windows Server 2012 R2 VL),
#    ..._X64FRE_SERVER_EVAL_EN-US-IR3_SSS_X64FREE_EN-US_DV9.ISO (2012 R2 evaluation,
#    download.microsoft.com); retail/MSDN media are labelled SSS_X64FRE_EN-US_DV9.
# 4. the ISO's file name, in the build lab's <build>.<branch>_<SKU>_<CHANNEL>_<ARCH>FRE_<lang>.iso
#    form: EVAL in the SKU, VOL/VL for volume licence, OEMRET/RET/OEM for retail/OEM; VLSC
#    downloads start with SW_DVD.
# With no evidence at all, a key is required: a published KMS client key (GVLK) installs from VL
# and retail media alike, so asking for one is safe, while guessing "volume" stops Setup.

VOLUME, EVALUATION, RETAIL, UNKNOWN = "volume licence", "evaluation", "retail/OEM", "unknown"
LABEL_CHANNEL = re.compile(r"_(?:X64|X86|A64|ARM64)FRE([VE]?)_", re.I)
NAME_TOKENS = (
    (EVALUATION, re.compile(r"EVAL", re.I)),
    (VOLUME, re.compile(r"(^SW_DVD|[_.-]VOL[_.-]|[_.-]VL[_.-])", re.I)),
    (RETAIL, re.compile(r"[_.-](OEMRET|RET|OEM)[_.-]", re.I)),
)


@dataclass(frozen=True)
class Channel:
    kind: str  # VOLUME, EVALUATION, RETAIL or UNKNOWN
    evidence: str

    @property
    def needs_key(self) -> bool:
        return self.kind in (RETAIL, UNKNOWN)


def _ei_cfg_channel(text: str) -> Channel | None:
    sections: dict[str, str] = {}
    current = None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1].strip().lower()
        elif line and current and current not in sections:
            sections[current] = line
    if sections.get("vl") == "1":
        return Channel(VOLUME, "sources\\ei.cfg says [VL] 1")
    if sections.get("channel", "").lower() in ("retail", "oem"):
        return Channel(RETAIL, f"sources\\ei.cfg says [Channel] {sections['channel']}, [VL] {sections.get('vl', 'absent')}")
    return None


def channel(media: Media, image: Image, file_name: str | None = None) -> Channel:
    if image.edition_id and "eval" in image.edition_id.lower():
        return Channel(EVALUATION, f"EditionId {image.edition_id}")
    if media.ei_cfg:
        found = _ei_cfg_channel(media.ei_cfg)
        if found:
            return found
    if media.label:
        match = LABEL_CHANNEL.search(media.label)
        if match:
            kind = {"V": VOLUME, "E": EVALUATION, "": RETAIL}[match.group(1).upper()]
            return Channel(kind, f"volume label {media.label}")
    if file_name:
        for kind, token in NAME_TOKENS:
            if token.search(file_name):
                return Channel(kind, f"file name {file_name}")
    return Channel(UNKNOWN, "neither ei.cfg, the volume label nor the file name tells volume-licence, evaluation or retail media apart")


# ------------------------------------------------------------------ the decision


@dataclass(frozen=True)
class Verdict:
    """What Setup would install from this ISO for this profile, and why it would stop (problems)."""

    image: Image | None
    channel: Channel | None
    problems: tuple[str, ...]
    origin: str

    def summary(self) -> str:
        if self.image is None or self.channel is None:
            return "; ".join(self.problems)
        key = "needs the product key the profile sets" if self.channel.needs_key else "installs without a product key"
        return f"{self.image.describe()}; {self.channel.kind} media ({self.channel.evidence}), {key}"


def _names(media: Media) -> str:
    listed = ", ".join(f"{i.index} '{i.setup_name}'" for i in media.images)
    if media.wim_names_error:
        # Then these are display names, which Setup does not match: say so rather than mislead.
        listed += (f" (display names: the image NAMEs Setup matches could not be read from "
                   f"{media.image_file}: {media.wim_names_error})")
    return listed


def check(profile: Profile, media: Media, iso_path: Path, file_name: str | None = None) -> Verdict:
    """Decide from the image list alone; file_name is the ISO's original name when known (iso-add)."""
    iso = profile.data.iso
    where = _rel(profile.path)
    problems: list[str] = []
    index = iso.get("index")
    by_index = {image.index: image for image in media.images}
    image = by_index.get(index) if isinstance(index, int) else None
    if image is None:
        problems.append(f"iso.index is {index!r} in {where}, but {media.image_file} of {iso_path} holds images "
                        f"{_names(media)}: set iso.index to one of {sorted(by_index)}")
        return Verdict(None, None, tuple(problems), media.origin)

    wanted_name = iso.get("image_name")
    if wanted_name:
        named = [i for i in media.images if i.setup_name == wanted_name]
        if not named:
            near = [i for i in media.images if i.setup_name.strip().casefold() == str(wanted_name).strip().casefold()]
            hint = (f" ('{near[0].setup_name}' differs only in case or spaces; Setup compares names exactly)" if near else "")
            problems.append(f"iso.image_name '{wanted_name}' in {where} is not an image of {iso_path}{hint}; it holds "
                            f"{_names(media)}: set iso.image_name to the image's exact name, or to null to select by iso.index")
        elif len(named) > 1:
            problems.append(f"{iso_path} holds {len(named)} images named '{wanted_name}' (indexes "
                            f"{', '.join(str(i.index) for i in named)}), so Setup cannot select by name: "
                            f"set iso.image_name: null in {where} to select by iso.index")
        elif named[0].index != image.index:
            problems.append(f"iso.index {image.index} in {where} is '{image.setup_name}', but iso.image_name '{wanted_name}' is "
                            f"image {named[0].index} of {iso_path}: make them agree (iso.index: {named[0].index})")

    wanted_type = iso.get("installation_type")
    if wanted_type and image.installation_type != wanted_type:
        fits = [i for i in media.images if i.installation_type == wanted_type]
        other = (f"set iso.index to one of {[i.index for i in fits]} ({'; '.join(i.describe() for i in fits)})" if fits
                 else f"{iso_path} has no {wanted_type} image: it is not the media this box is built from")
        problems.append(f"{image.describe()} of {iso_path} is not {wanted_type}, which {where} wants "
                        f"(iso.installation_type): {other}")

    found = channel(media, image, file_name)
    key = iso.get("product_key")
    if found.needs_key and not key:
        problems.append(_needs_key(profile, image, iso_path, found))
    elif found.kind == EVALUATION and key:
        problems.append(f"{iso_path} is evaluation media ({found.evidence}), and no other key fits an evaluation "
                        f"edition: Setup would stop on the key page. Set iso.product_key: null in {where}")
    return Verdict(image, found, tuple(problems), media.origin)


def _needs_key(profile: Profile, image: Image, iso_path: Path, found: Channel) -> str:
    where = _rel(profile.path)
    kind = "is retail/OEM media" if found.kind == RETAIL else "may be retail media"
    gvlk = (profile.data.iso.get("kms_client_keys") or {}).get(image.edition_id or "")
    offer = (f"your own key for {image.edition_id}, or Microsoft's published KMS client setup key (GVLK) for it, "
             f"{gvlk} (iso.kms_client_keys, from Microsoft's 'KMS client activation and product keys' page)"
             if gvlk else f"your product key for {image.edition_id or image.name}")
    return (f"{iso_path} {kind} ({found.evidence}): {image.describe()} needs a product key, and iso.product_key "
            f"is null in {where}, so Setup would stop on the product-key page while Packer waits. "
            f"Set iso.product_key in {where} to {offer}")


def verify(profile: Profile, iso_path: Path, file_name: str | None = None) -> Verdict:
    """Read the ISO's images and check them; raise ImagesRefused with every problem, or ImagesUnavailable."""
    media = read_media(iso_path)
    verdict = check(profile, media, iso_path, file_name)
    if verdict.problems:
        lines = "\n".join(f"  - {p}" for p in verdict.problems)
        raise ImagesRefused(f"box {profile.name}: Setup cannot install from {iso_path} unattended:\n{lines}\n"
                            f"  (image list from {verdict.origin})")
    return verdict


def preflight_build(profile: Profile, checked, say) -> None:
    """The build's check before Packer: checked is the runner's k4w.media.iso.IsoCheck; say(line) reports.

    Only Windows boxes built from a local ISO: Linux installers have no image index or key page.
    """
    if not profile.is_windows or checked is None or checked.mode != "local":
        return
    verdict = verify(profile, checked.path)
    say(f"iso images: {verdict.summary()} (from {verdict.origin})")
