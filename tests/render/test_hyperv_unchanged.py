"""A Hyper-V cluster.yml renders byte for byte what it rendered before the libvirt provider existed.

The libvirt provider (issue 35) adds to cluster.json, the Vagrantfile's data, and to the Packer templates;
none of it may reach a Hyper-V user's artifacts. tests/fixtures/hyperv-render.json holds the sha256 of
every file `render_files` returns for the repository's cluster.yml and each examples/**/*.yml written for
Hyper-V, as rendered by main at commit 3564b1c (the last commit before the provider's parts).

A rendered file that changes on purpose is named in DELIBERATE with its reason, and is then held to what it
must be instead; the snapshot itself stays main's. The snapshot changes only with a reason a reviewer can read in the same commit (a deliberate change of a
Hyper-V artifact); never regenerate it to make this test pass. To regenerate, from the checkout whose
rendering is the new reference:

    /work/main/.venv/bin/python -m tests.render.test_hyperv_unchanged > tests/fixtures/hyperv-render.json

(to regenerate it from another commit, run it in an export of that commit, e.g.
`git archive COMMIT | tar -x -C DIR`, with this file copied there).
"""

from __future__ import annotations

import functools
import hashlib
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
SNAPSHOT = ROOT / "tests" / "fixtures" / "hyperv-render.json"
# Never written (render_files renders in memory); inside the checkout, so the Packer templates name their
# paths relative to it as for the default --out build.
OUT = ROOT / "build-hyperv-snapshot"
# cluster.json names the box catalogues and the secrets file by absolute path: the checkout's own place
# is replaced by this, so the digests do not depend on where the repository is cloned.
ROOT_MARK = "<checkout>"


# Rendered files a Hyper-V config renders differently from 3564b1c on purpose: {file: why}. Each is a copy of a
# checkout file a Packer template names (k4w.render.templates.shipped_sources), held to being that file verbatim.
DELIBERATE = {
    "packer/vagrant/box/ubuntu.Vagrantfile": (
        "issue 35: the Ubuntu box Vagrantfile gains a libvirt block for boxes booted without a bootloader; it sets "
        "nothing unless k4w-direct-boot.json is beside it in the box, which no Hyper-V box carries"),
    "packer/guest/ubuntu/lib.sh": (
        "issue 36: k4w_build_host_copy (the copy k4w_component_file made inline) and k4w_import_images, which "
        "imports nothing while K4W_IMAGE_IMPORTS is empty (downloads.images: registry, the default); k4w_load_images, "
        "the Docker era's, likewise"),
    "packer/guest/ubuntu/bake/04-kubernetes.sh": (
        "issue 36: calls k4w_load_images before the pre-pull; with the default downloads.images it loads nothing"),
    "packer/guest/ubuntu/bake/04-kubernetes-node.sh": (
        "issue 36: calls k4w_import_images before the pre-pull; with the default downloads.images it imports nothing"),
    "packer/guest/windows/bake/04-prepull-images.ps1": (
        "issue 36: imports each image of K4W_IMAGE_IMPORTS from the build CD before the pulls; with the default "
        "downloads.images that variable is empty and the step pulls as before"),
}
# Rendered templates that differ from 3564b1c by exactly these added lines, on purpose: {line: why}. Each is
# held to being the snapshot's file once those lines are taken out.
ADDED_LINES = {
    '    "K4W_IMAGE_IMPORTS=",': (
        "issue 36: every box's steps get the images to import (Ubuntu and, since the Windows import, Windows); "
        "empty under the default downloads.images"),
}


def hyperv_configs(root: Path = ROOT) -> list[Path]:
    """The repository's cluster.yml and every example written for Hyper-V (host.provider unset or hyperv)."""
    import yaml

    found = [root / "cluster.yml", *sorted((root / "examples").rglob("*.yml"))]
    return [p for p in found if ((yaml.safe_load(p.read_text()) or {}).get("host") or {}).get("provider", "hyperv") == "hyperv"]


@functools.cache
def rendered(root: Path = ROOT) -> dict[str, dict[str, str]]:
    """{config path relative to root: {rendered file: its text, the checkout's path replaced}}, rendered once."""
    from k4w import render
    from k4w.derive.cluster import Cluster

    return {path.relative_to(root).as_posix(): {name: text.replace(str(root), ROOT_MARK)
                                                for name, text in sorted(render.render_files(Cluster.load(path), root / OUT.name).items())}
            for path in hyperv_configs(root)}


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def digests(root: Path = ROOT) -> dict[str, dict[str, str]]:
    """{config path relative to root: {rendered file: sha256 of its text, the checkout's path replaced}}."""
    return {config: {name: _sha256(text) for name, text in files.items()} for config, files in rendered(root).items()}


def digests_without_added_lines(root: Path = ROOT) -> dict[str, dict[str, str]]:
    """digests(), each file's ADDED_LINES taken out first."""
    return {config: {name: _sha256("".join(line for line in text.splitlines(keepends=True) if line.rstrip("\n") not in ADDED_LINES))
                     for name, text in files.items()} for config, files in rendered(root).items()}


def snapshot() -> dict[str, dict[str, str]]:
    return json.loads(SNAPSHOT.read_text()) if SNAPSHOT.is_file() else {}


@pytest.mark.parametrize("config", sorted(snapshot()))
def test_a_hyperv_config_renders_exactly_what_it_did_before_the_libvirt_provider(config):
    expected = snapshot()[config]
    actual = digests()[config]
    assert sorted(actual) == sorted(expected), "the set of rendered files changed for a Hyper-V config"
    trimmed = digests_without_added_lines()[config]
    changed = [name for name in expected if actual[name] != expected[name] and name not in DELIBERATE
               and trimmed[name] != expected[name]]
    assert not changed, f"{config}: these Hyper-V artifacts changed: {changed}"
    for name in DELIBERATE.keys() & actual.keys():
        source = ROOT / name.split("/", 1)[1]   # packer/<path in the checkout>
        assert actual[name] == hashlib.sha256(source.read_bytes()).hexdigest(), f"{name} is not {source} verbatim"


def test_every_hyperv_example_is_in_the_snapshot():
    # A new Hyper-V example without a snapshot entry would be checked by nothing here.
    assert SNAPSHOT.is_file(), f"{SNAPSHOT} is missing: this module's docstring says how it is made"
    assert sorted(p.relative_to(ROOT).as_posix() for p in hyperv_configs()) == sorted(snapshot())


if __name__ == "__main__":
    json.dump(digests(Path.cwd().resolve()), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
