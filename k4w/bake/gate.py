"""What stops a box build before Packer starts, decided in one place.

The real build, its dry run and `invoke plan` all call decide(), so none of them promises a
build that another refuses (docs/hyperv-host.md "Boxes"). The refusals, in the order they are checked:
- this host cannot run the templates' Hyper-V builders (not Windows, Hyper-V off, not elevated);
- Packer is missing, too old, or lacks a plugin or a CD authoring tool the templates need;
- a validator of `invoke validate` rejects the render;
- per box: the ISO is missing, has no known sha256 or does not match it; a Windows ISO's images
  cannot be installed unattended (k4w.media.iso_images); a download has no checksum; a Windows box
  baked on libvirt lacks its recorded virtio-win ISO.
"""

from __future__ import annotations

import contextlib
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

from rich.console import Console

from k4w.media import iso as iso_mod
from k4w.media import build_media, iso_images
from k4w import render, validate
from k4w.derive.cluster import Cluster
from k4w.infra.errors import K4wError
from k4w.model.profiles import Profile
from k4w.infra import host, packer_cli, packer_hcl
from k4w.model import pins
from .progress import hash_progress

# Builder types that drive Hyper-V (hyperv-iso, hyperv-vmcx): Packer stops with "Failed creating
# Hyper-V driver" on any other host. The CI end-to-end's qemu builder runs anywhere.
HYPERV_BUILDER_PREFIX = "hyperv-"


@dataclass(frozen=True)
class Target:
    """One box a build would run Packer for."""

    profile: Profile
    template: dict  # the rendered Packer template
    iso_override: Path | None = None  # --iso
    iso_sha256: str | None = None  # the expected sha256 of --iso, when the caller made that image


@dataclass
class Decision:
    host: list[str] = field(default_factory=list)
    packer: list[str] = field(default_factory=list)
    validation: list[str] = field(default_factory=list)
    boxes: dict[str, list[str]] = field(default_factory=dict)  # box -> its own problems
    isos: dict[str, iso_mod.IsoCheck] = field(default_factory=dict)  # box -> what was verified

    @property
    def everywhere(self) -> list[str]:
        """Problems that stop every box."""
        return self.host + self.packer + self.validation

    @property
    def refused(self) -> bool:
        return bool(self.everywhere or any(self.boxes.values()))

    def lines(self) -> list[str]:
        """Every problem, one line each (multi-line messages indented), for a message or a plan."""
        sections = [("this host", self.host), ("packer", self.packer), ("validate", self.validation)]
        sections += [(box, problems) for box, problems in self.boxes.items()]
        return [f"{what}: {problem}".replace("\n", "\n    ") for what, problems in sections for problem in problems]


def needs_hyperv(templates: Iterable[dict]) -> bool:
    return any(str(b.get("type", "")).startswith(HYPERV_BUILDER_PREFIX) for t in templates for b in t.get("builders", []))


def host_problems(templates: Iterable[dict]) -> list[str]:
    """What this host lacks to run the templates' Hyper-V builders: Windows, Hyper-V, elevation."""
    if not needs_hyperv(templates):
        return []
    return [f"{chk.name}: {chk.detail}. Fix: {chk.fix}" for chk in host.host_checks()
            if not chk.ok and chk.required_for("build")]


@contextlib.contextmanager
def scratch_render(cluster: Cluster) -> Iterator[Path]:
    """For a dry run's validators: the render in a private temporary folder, deleted afterwards,
    never --out. Rendered for that folder, so every path in it (cd_files, http_directory) exists."""
    with tempfile.TemporaryDirectory(prefix="k4w-dry-run-") as folder:
        render.render(cluster, Path(folder))
        yield Path(folder)


def validation_problems(cluster: Cluster, folder: Path, say=lambda line: None) -> list[str]:
    """What `invoke validate` rejects in the render in folder, each naming its validator.

    A validator whose program this host lacks is said, not a refusal: a Windows build host has no
    debconf-set-selections at all, and the artifact is the same one `invoke validate` and CI
    check on Linux. A missing tool is not a rejection; `invoke validate` still fails on it."""
    problems = []
    for res in validate.validate_all(cluster, folder):
        if res.missing_tool:
            say(f"not validated on this host: {res.validator} ({res.missing_tool} is not installed; "
                "`invoke validate` on Linux and CI check it)")
            continue
        problems += [f"{res.validator}: {problem}" for problem in res.problems]
    return problems


def box_problems(cluster: Cluster, target: Target, out: Path, console: Console, *, hash_iso: bool,
                 write_cache: bool) -> tuple[iso_mod.IsoCheck | None, list[str]]:
    """The ISO check and the checksum pins of one box. hash_iso=False checks all but the hash
    itself (a cached mismatch still counts); write_cache=False leaves OUT/cache alone (a dry run)."""
    profile, problems = target.profile, []
    path = target.iso_override or iso_mod.iso_path(profile)
    cached = iso_mod.HashCache(out).lookup(path) if path.is_file() else None
    hashing = hash_iso and path.is_file() and cached is None
    progress = hash_progress(console, f"{profile.name}: {path.name}", path.stat().st_size) if hashing \
        else contextlib.nullcontext(None)
    check = None
    try:
        with progress as callback:
            check = iso_mod.check_iso(profile, out, target.iso_override, progress=callback, hash_it=hash_iso,
                                      expected_sha256=target.iso_sha256, write_cache=write_cache)
    except iso_mod.IsoError as exc:
        problems.append(str(exc))
    if check is not None and not problems:
        # Windows media Setup cannot install from unattended (wrong image, a key page) stop here,
        # not two hours into a build; the same check as iso-add and doctor.
        try:
            iso_images.preflight_build(profile, check, lambda line: console.print(f"{profile.name}: {line}", markup=False,
                                                                                   highlight=False))
        except K4wError as exc:
            problems.append(str(exc))
    problems += pins.unpinned_messages(profile, {}, cluster.config_file)
    problems += _guest_digest_problems(profile, cluster.config_file)
    if profile.is_windows:
        problems += build_media.cd_name_problems(profile)
    # A libvirt bake of a Windows box attaches the virtio-win ISO (templates/packer/windows.pkr.hcl.j2):
    # without it Setup finds no disk, and Packer would wait hours for WinRM.
    if profile.is_windows and installs_with_qemu(target.template):
        try:
            iso_mod.check_virtio_win(profile, out, hash_it=hash_iso, write_cache=write_cache)
        except iso_mod.IsoError as exc:
            problems.append(str(exc))
    if check and check.expected:
        problems += unchecked_iso(target.template, check.expected)
    return check, problems


def _guest_digest_problems(profile: Profile, config_file) -> list[str]:
    """The guest checks each file again against a digest in its step variables, known at render
    time: a checksum file the host reads at fetch time (sha256_url) cannot be that digest."""
    return [
        f"components.{name} of {profile.name} is checked only against {spec['sha256_url']}, which the guest cannot "
        f"read; put the digest that file holds in {profile.path.name} as components.{name}.sha256 (with its "
        f"checksum_source), or run: {pins.pin_command(profile.name, name, config_file)}"
        for name, spec in (profile.data.get("components") or {}).items()
        if spec.get("url") and spec.get("sha256_url") and not any(spec.get(k) for k in pins.GUEST_KEYS)
    ]


installs_with_qemu = packer_hcl.installs_with_qemu


def unchecked_iso(template: dict, expected: str) -> list[str]:
    """Hyper-V builders (and a libvirt host's qemu builder that installs from the ISO) whose iso_checksum is
    not the sha256 k4w verified: Packer must check the
    ISO again itself, because the hash cache trusts a file's size and times (docs/hyperv-host.md "Boxes")."""
    want = f"sha256:{expected}"
    return [
        f"the rendered template's builder {b.get('name') or b['type']} has iso_checksum {b.get('iso_checksum')!r}, "
        f"not {want!r}; render again (invoke render) so Packer verifies the ISO too"
        for b in template.get("builders", [])
        if (str(b.get("type", "")).startswith(HYPERV_BUILDER_PREFIX) or (b.get("type") == "qemu" and not b.get("disk_image")))
        and str(b.get("iso_checksum", "")).lower() != want
    ]


def decide(cluster: Cluster, targets: list[Target], out: Path, rendered_folder: Path, console: Console, *,
           write_cache: bool = True) -> Decision:
    """Every refusal for these boxes. rendered_folder holds the render the validators read (OUT,
    or a dry run's scratch_render). A 5 GB ISO is hashed only when nothing else stops every box."""
    decision = Decision()
    if not targets:
        return decision
    templates = [t.template for t in targets]
    decision.host = host_problems(templates)
    decision.packer = packer_cli.packer_preflight(templates)
    decision.validation = validation_problems(cluster, rendered_folder,
                                              lambda line: console.print(line, markup=False, highlight=False, style="yellow"))
    for target in targets:
        check, problems = box_problems(cluster, target, out, console, hash_iso=not decision.everywhere,
                                       write_cache=write_cache)
        decision.boxes[target.profile.name] = problems
        if check:
            decision.isos[target.profile.name] = check
    return decision
