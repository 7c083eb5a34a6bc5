"""User pins: checksums a user measured on their own host for downloads nobody publishes one for.

Flannel publishes no checksum for `flanneld.exe`, and no public source pins one for v0.11.0.
Rather than build with an unverified download, the user runs `invoke pin BOX COMPONENT`: k4w
downloads the file on the host, through the proxy in cluster.yml, prints its URL, size and
sha256, and records them in `k4w-pins.yml` next to cluster.yml. A build uses the profile's
checksum, else the user's pin, and never neither.

The pins file is the user's: k4w adds entries but never changes a recorded checksum unless
asked to with --replace, and then says what it replaced.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as _dt
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import yaml

from k4w.infra import filelock, files, image_pull
from k4w.infra.errors import K4wError
from k4w.model.profiles import Attr, Profile
from k4w.infra.download import Downloaded, Expected, download
from k4w.model.profiles import CHECKSUM_KEYS

PINS_FILE = "k4w-pins.yml"
HEADER = """\
# k4w-pins.yml: checksums you measured yourself with `invoke pin BOX COMPONENT`, for downloads
# whose publisher prints no checksum. k4w adds entries here and never changes one silently
# (`invoke pin ... --replace` does, and says so). Check a value against a second source you
# trust before you build with it. Keep this file next to the cluster.yml it belongs to.
"""
# k4w-pins.yml's image section, beside the boxes: {images: {<image name>: {<platform>: <manifest digest>}}},
# what `invoke pin-images` recorded: the manifest an image resolved to for a box's platform. No box is
# named "images" (a profile's name is its file's, boxes/<name>.yml).
IMAGES = "images"
# The ones a guest can check its file against: a digest known at render time. A published checksum
# file (sha256_url) is read by the host's fetch only.
GUEST_KEYS = ("sha256", "sha512")


def pins_path(config_file: str | Path) -> Path:
    return Path(config_file).resolve().parent / PINS_FILE


def load(config_file: str | Path) -> dict:
    """{box: {component: {url, sha256, size, pinned}}}; empty when there is no pins file."""
    path = pins_path(config_file)
    if not path.is_file():
        return {}
    text = path.read_text(encoding="utf-8")
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise K4wError(f"{path}: not valid YAML ({exc}); fix or delete it, then run invoke pin again") from None
    problem = _shape_problem(data)
    if problem:
        where, why = problem
        line = _line_of(text, where)
        raise K4wError(f"{path}{f':{line}' if line else ''}: entry {'.'.join(map(str, where)) or '(top level)'}: {why}; "
                       f"fix or delete it, then run invoke pin again")
    return data


# The shape pin() writes: {box: {component: {url, sha256, size, pinned}}}.
_PIN_TYPES = {"url": str, "sha256": str}


def _shape_problem(data) -> tuple[tuple, str] | None:
    """(where, why) of the first entry that is not a pin as `invoke pin` writes it, else None."""
    if not isinstance(data, dict):
        return (), "expected a mapping of box -> component -> pin"
    images = data.get(IMAGES) or {}
    if not isinstance(images, dict):
        return (IMAGES,), "expected a mapping of image name -> platform -> digest"
    for name, by_platform in images.items():
        if not isinstance(by_platform, dict):
            return (IMAGES, name), f"expected a mapping of platform -> digest, not {by_platform!r}"
        for platform, digest in by_platform.items():
            if not isinstance(digest, str) or not image_pull.DIGEST.match(digest):
                return (IMAGES, name, platform), f"expected a sha256:<64 hex digits> manifest digest, not {digest!r}"
    for box, components in ((b, c) for b, c in data.items() if b != IMAGES):
        if not isinstance(components, dict):
            return (box,), f"expected a mapping of component -> pin, not {type(components).__name__} {components!r}"
        for component, pin in components.items():
            if not isinstance(pin, dict):
                return (box, component), f"expected a pin (url, sha256, size, pinned), not {type(pin).__name__} {pin!r}"
            for key, kind in _PIN_TYPES.items():
                if not isinstance(pin.get(key), kind):
                    return (box, component, key), f"expected a {kind.__name__}, not {pin.get(key)!r}"
    return None


def _line_of(text: str, where: tuple) -> int | None:
    """The line of the entry at `where` (box, component, key) in the YAML text, or its nearest parent's."""
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return None
    line = None
    for part in where:
        if not isinstance(node, yaml.MappingNode):
            break
        match = next(((k, v) for k, v in node.value if k.value == str(part)), None)
        if match is None:
            break
        line, node = match[0].start_mark.line + 1, match[1]
    return line


@dataclass(frozen=True)
class Checksum:
    key: str  # sha256 | sha512 | sha256_url
    value: str
    source: str  # where it comes from, for messages and plans


def checksum_for(profile: Profile, component: str, pins: dict) -> Checksum | None:
    """The profile's checksum of a component, else the user's pin, else None."""
    own = (profile.data.get("components") or {}).get(component) or {}
    spec = (apply(profile, pins).data.get("components") or {}).get(component) or {}
    for key in CHECKSUM_KEYS:
        if spec.get(key):
            source = f"{profile.path.name} components.{component}.{key}" if own.get(key) else spec["checksum_source"]
            return Checksum(key, str(spec[key]), source)
    return None


def apply(profile: Profile, pins: dict) -> Profile:
    """The profile with the user's pins filled in where the profile itself has no checksum, so
    every later stage (the step variables, the guest's own hash check, the build's refusal)
    sees one set of checksums; and with `image_digests`, {image name: manifest digest} pinned for the
    box's platform, which the bake's image import checks each image against."""
    components = profile.data.get("components") or {}
    pinned = {name: (pins.get(profile.name) or {}).get(name) for name in components}
    # A pin is for one file: a profile that moved to another URL needs a new pin.
    chosen = {name: pin for name, pin in pinned.items()
              if pin and pin.get("sha256") and not any(components[name].get(k) for k in GUEST_KEYS)
              and pin.get("url") == components[name].get("url")}
    digests = image_digests(pins, str(profile.image_platform)) if pins.get(IMAGES) else {}
    if not chosen and not digests:
        return profile
    data = Attr.wrap(copy.deepcopy(dict(profile.data)))
    for name, pin in chosen.items():
        data["components"][name]["sha256"] = str(pin["sha256"])
        data["components"][name]["checksum_source"] = f"{PINS_FILE} {profile.name}.{name} (pinned {pin.get('pinned', '?')})"
    if digests:
        data["image_digests"] = Attr(digests)
    return dataclasses.replace(profile, data=data)


def image_digests(pins: dict, platform: str) -> dict[str, str]:
    """{image name: manifest digest} the pins file records for one platform."""
    return {name: by_platform[platform] for name, by_platform in (pins.get(IMAGES) or {}).items()
            if platform in (by_platform or {})}


@dataclass(frozen=True)
class ImagePinResult:
    recorded: list[str]     # "<name> (<platform>) <digest>" newly written
    unchanged: int
    conflicts: list[str]    # an image that now resolves to another digest than the pinned one (not written)


def add_component_pins(config_file: str | Path, bundled: dict) -> list[str]:
    """Add the component pins of `bundled` (a pins document, e.g. from a bundle) that the pins file lacks; one
    that differs from a pin already there is refused, never replaced. The "<box>.<component>" added."""
    problem = _shape_problem(bundled)
    if problem:
        raise K4wError(f"the bundled {PINS_FILE}: entry {'.'.join(map(str, problem[0]))}: {problem[1]}")
    with filelock.updating(pins_path(config_file)):   # read and written as one step: another k4w may pin meanwhile
        ours = load(config_file)
        added, conflicts = [], []
        for box, components in bundled.items():
            if box == IMAGES:
                continue
            for component, pin in components.items():
                old = (ours.get(box) or {}).get(component)
                if old is None:
                    ours.setdefault(box, {})[component] = dict(pin)
                    added.append(f"{box}.{component}")
                elif (old.get("url"), old.get("sha256")) != (pin.get("url"), pin.get("sha256")):
                    conflicts.append(f"{box}.{component}: pinned here as {old.get('sha256')} ({old.get('url')}), "
                                     f"in the bundle as {pin.get('sha256')} ({pin.get('url')})")
        if conflicts:
            raise K4wError("the bundle's component pins differ from this host's:\n" + "\n".join(conflicts))
        if added:
            _write(pins_path(config_file), ours)
    return added


def record_images(config_file: str | Path, resolved: dict[tuple[str, str], str], replace: bool = False) -> ImagePinResult:
    """Record {(image name, platform): manifest digest} in the pins file. A digest already pinned is never
    changed silently: a different one is a conflict (the tag moved upstream or in a mirror) unless
    replace, and then the message says what it replaced."""
    with filelock.updating(pins_path(config_file)):
        pins = load(config_file)
        images = pins.setdefault(IMAGES, {})
        recorded, conflicts, unchanged = [], [], 0
        for (name, platform), digest in sorted(resolved.items()):
            old = (images.get(name) or {}).get(platform)
            if old == digest:
                unchanged += 1
                continue
            if old and not replace:
                conflicts.append(f"{name} ({platform}) is pinned as {old} but now resolves to {digest}: the tag moved; find out "
                                 f"why, then run: invoke pin-images --replace")
                continue
            images.setdefault(name, {})[platform] = digest
            recorded.append(f"{name} ({platform}) {digest}" + (f", replacing {old}" if old else ""))
        if recorded:
            _write(pins_path(config_file), pins)
    return ImagePinResult(recorded, unchanged, conflicts)


def pin_command(box: str, component: str, config_file: str | Path | None = None) -> str:
    """config_file None: the default cluster.yml, which needs no --config."""
    config_file = Path(config_file or "cluster.yml")
    cfg_arg = "" if config_file == Path("cluster.yml") else f" --config {config_file}"
    return f"invoke pin {box} {component}{cfg_arg}"


def unpinned(profile: Profile, pins: dict) -> list[str]:
    """Components the box downloads with neither a profile checksum nor a user pin."""
    return [
        name
        for name, spec in (profile.data.get("components") or {}).items()
        if spec.get("url") and checksum_for(profile, name, pins) is None
    ]


def unpinned_messages(profile: Profile, pins: dict, config_file: str | Path | None = None) -> list[str]:
    """One line per unpinned component, naming the exact command that fixes it."""
    components = profile.data.get("components") or {}
    return [
        f"components.{name} ({components[name].get('version', '?')}) of {profile.name} has no checksum in "
        f"{profile.path.name} and no user pin; run: {pin_command(profile.name, name, config_file)}"
        for name in unpinned(profile, pins)
    ]


@dataclass(frozen=True)
class PinResult:
    box: str
    component: str
    url: str
    size: int
    sha256: str
    recorded: bool
    note: str


def pin(profile: Profile, component: str, config_file: str | Path, proxy, replace: bool = False,
        progress: Callable[[int, int | None], None] | None = None, source_url: str | None = None,
        keep: Callable[[Downloaded], None] | None = None) -> PinResult:
    """Download the component on this host and record its sha256 as the user's pin.

    source_url: where to download it from, when not the profile's URL (a mirror's copy); the pin
    still names the profile's URL. keep: handed the downloaded file when it is verified against
    what a build will use (a profile checksum, the new pin or the same pin), before the temporary
    folder goes; the component cache takes it that way (k4w.bake.cache.adopt)."""
    components = profile.data.get("components") or {}
    spec = components.get(component)
    if not spec or not spec.get("url"):
        known = ", ".join(n for n, s in components.items() if s.get("url")) or "none"
        raise K4wError(f"box {profile.name} has no downloaded component '{component}' (components with a URL: {known})")
    url = str(spec["url"])
    published = next((k for k in CHECKSUM_KEYS if spec.get(k)), None)
    expected = None
    if published in ("sha256", "sha512"):
        expected = Expected(published, str(spec[published]))
    with tempfile.TemporaryDirectory(prefix="k4w-pin-") as tmp:
        got = download(source_url or url, Path(tmp) / Path(url).name, expected, proxy, progress)
        with filelock.updating(pins_path(config_file)):   # read after the download, which may take minutes
            result = _record(profile, component, config_file, url, got, load(config_file), published, expected, replace)
        if keep and (expected or not published):
            keep(got)
    return result


def _record(profile: Profile, component: str, config_file: str | Path, url: str, got: Downloaded, pins: dict,
            published: str | None, expected: Expected | None, replace: bool) -> PinResult:
    if published:
        how = "verified against it" if expected else "it is checked against that file at build time"
        return PinResult(profile.name, component, url, got.size, got.sha256, False,
                         f"{profile.path.name} already gives components.{component}.{published}; {how}; nothing recorded")
    old = (pins.get(profile.name) or {}).get(component)
    if old and old.get("sha256") == got.sha256 and old.get("url") == url:
        return PinResult(profile.name, component, url, got.size, got.sha256, False, "already pinned with this sha256; unchanged")
    if old and not replace:
        raise K4wError(
            f"{pins_path(config_file)} pins {profile.name}.{component} as {old.get('sha256')} ({old.get('url')}), "
            f"but the download now has sha256 {got.sha256} ({url}). The file changed upstream or in transit: find out why. "
            f"To record the new value anyway: {pin_command(profile.name, component, config_file)} --replace"
        )
    entry = {"url": url, "sha256": got.sha256, "size": got.size,
             "pinned": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    pins.setdefault(profile.name, {})[component] = entry
    _write(pins_path(config_file), pins)
    note = f"replaced the earlier pin {old.get('sha256')}" if old else "recorded"
    return PinResult(profile.name, component, url, got.size, got.sha256, True, f"{note} in {pins_path(config_file)}")


def _write(path: Path, pins: dict) -> None:
    """Whole: a full disk or a crash leaves the old file, never a half-written one. Callers hold
    filelock.updating(path) from their load on."""
    files.write_file(path, HEADER + yaml.safe_dump(pins, sort_keys=True, default_flow_style=False))
