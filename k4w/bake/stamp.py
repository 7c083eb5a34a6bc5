"""The up-to-date stamp of a box: one sha256 over every input that shapes it.

Inputs: the rendered Packer template, the rendered installer answers in http/<box>/ (with
placeholder secrets, so rotating the Administrator password does not force a rebuild),
every file under guest/ or vagrant/box/ that the template references (folders
recursively; the render ships them in packer/, named here by their checkout path), the box profile, and the ISO's expected sha256. The record keeps each input's
hash too, so a rebuild can say what changed.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from k4w.infra import packer_hcl
from k4w.infra import sources
from k4w.media import iso
from k4w.model.profiles import Profile

# Folders of the repository whose files reach the box through the template.
REFERENCED_DIRS = ("guest", "vagrant/box")


def _root() -> Path:
    return sources.REPO.root


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def referenced_files(template: dict, root: Path | None = None) -> list[Path]:
    """Files under guest/ and vagrant/box/ named anywhere in the template (folders expanded)."""
    root = (root or _root()).resolve()
    prefixes = [re.escape(str(root / d).replace("\\", "/")) for d in REFERENCED_DIRS]
    # A path inside a longer string (an inline command) ends at a quote, space, comma or ;.
    found = re.compile(rf"(?:{'|'.join(prefixes)})(?:/[^\s\"',;]*)?")
    relative = re.compile(rf"^(?:\./)?(?:{'|'.join(re.escape(d) for d in REFERENCED_DIRS)})(?:/.*)?$")
    paths: set[Path] = set()
    for text in _strings(template):
        text = text.replace("\\", "/")
        candidates = [m.group(0) for m in found.finditer(text)]
        if relative.match(text):
            candidates.append(str(root / text.removeprefix("./")))
        for candidate in candidates:
            path = Path(candidate.rstrip("/"))
            if path.is_dir():
                paths.update(p for p in path.rglob("*") if p.is_file())
            elif path.is_file():
                paths.add(path)
    return sorted(paths)


# The rendered folder of the templates, their path.root, as a key prefix of render_files.
SHIPPED_IN = "packer"


def shipped_files(template: dict, rendered: dict[str, str]) -> dict[str, str]:
    """{checkout-relative name: text} of the rendered copies the template (parsed with root
    SHIPPED_IN) names under the folders of REFERENCED_DIRS, folders expanded."""
    found: dict[str, str] = {}
    for text in _strings(template):
        rel = text.removeprefix(SHIPPED_IN + "/")
        if rel == text or not any(rel == d or rel.startswith(d + "/") for d in REFERENCED_DIRS):
            continue
        folder = text.rstrip("/") + "/"
        for key, content in rendered.items():
            if key == text or key.startswith(folder):
                found[key.removeprefix(SHIPPED_IN + "/")] = content
    return found


@dataclass(frozen=True)
class Stamp:
    sha256: str
    inputs: dict[str, str]  # input name -> its sha256

    def as_record(self) -> dict:
        return {"sha256": self.sha256, "inputs": self.inputs}

    def changed_since(self, recorded: dict | None) -> list[str]:
        """Input names whose hash differs from a recorded stamp (added or removed count too)."""
        old = (recorded or {}).get("inputs") or {}
        names = sorted(set(old) | set(self.inputs))
        return [n for n in names if old.get(n) != self.inputs.get(n)]


def compute(box: str, profile: Profile, rendered: dict[str, str], iso_sha256: str | None) -> Stamp:
    """rendered: render.render_files(cluster, out, secrets_for=None), i.e. placeholder secrets."""
    root = _root()
    template_key = packer_hcl.rel_path(box)
    template_text = rendered[template_key]
    inputs: dict[str, str] = {template_key: _sha(template_text.encode())}
    for rel, text in rendered.items():
        if rel.startswith(f"http/{box}/"):
            inputs[rel] = _sha(text.encode())
    # The checkout's files the template names ship beside it in packer/ (k4w.render.shipped_sources):
    # each is an input under its checkout name, hashed as rendered.
    for rel, text in shipped_files(packer_hcl.parse(template_text, template_key, root=SHIPPED_IN), rendered).items():
        inputs[rel] = _sha(text.encode("utf-8"))
    for path in referenced_files(packer_hcl.parse(template_text, template_key), root):
        inputs[path.resolve().relative_to(root.resolve()).as_posix()] = _sha(path.read_bytes())
    inputs[f"profile:{profile.path.name}"] = _sha(profile.path.read_bytes())
    inputs["iso:sha256"] = _sha((iso_sha256 or "unknown").encode())
    # A libvirt bake of a Windows box also installs from the virtio-win ISO: another release is another box.
    if profile.is_windows and profile.data.get("virtio_win") and packer_hcl.installs_with_qemu(packer_hcl.parse(template_text, template_key)):
        inputs["virtio-win:sha256"] = _sha((iso.virtio_win_sha256(profile) or "unknown").encode())
    digest = hashlib.sha256()
    for name in sorted(inputs):
        digest.update(f"{name}\0{inputs[name]}\n".encode())
    return Stamp(digest.hexdigest(), dict(sorted(inputs.items())))
