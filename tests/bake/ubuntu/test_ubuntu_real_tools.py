"""The Ubuntu artifacts checked by the programs that consume them, plus static rules on the steps."""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml

from k4w import render
from tests import helpers
from tests.helpers import system_tool

from .conftest import BOX, HTTP_PROXY, HTTPS_PROXY, PROFILE, ROOT, STEPS, cluster, qemu_cluster

OWN_SCRIPTS = sorted([*STEPS.glob("*.sh"), STEPS.parent / "lib.sh"])
STEP_SCRIPTS = [p for p in OWN_SCRIPTS if p.name != "lib.sh"]


def packer_validate(files: dict[str, str], box: str, tmp_path) -> subprocess.CompletedProcess:
    """The template with the folder it ships in (packer/: its guest scripts and Vagrantfile), written
    elsewhere than where it was rendered for, validated from yet another directory."""
    folder = tmp_path / "handed-on"
    for rel, text in files.items():
        if rel.startswith("packer/"):
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_bytes(text.encode("utf-8"))
    return helpers.packer_validate(folder / "packer" / f"{box}.pkr.hcl", cwd=tmp_path)


@pytest.mark.tools
@pytest.mark.parametrize("http,https", [(None, None), (HTTP_PROXY, None), (HTTP_PROXY, HTTPS_PROXY)])
def test_packer_validates_the_hyperv_template(tmp_path, http, https):
    files = render.render_files(cluster(http, https), tmp_path / "out")
    res = packer_validate(files, BOX, tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.tools
def test_packer_validates_the_qemu_template(profile_dir, tmp_path):
    files = render.render_files(qemu_cluster(), tmp_path / "out")
    res = packer_validate(files, "debian-12-ci", tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.tools
@pytest.mark.parametrize("script", OWN_SCRIPTS, ids=lambda p: p.name)
def test_shellcheck_clean(script):
    tool = system_tool("shellcheck")
    res = subprocess.run([tool, "-x", "--source-path=SCRIPTDIR", "--severity=style", str(script)],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout


@pytest.mark.tools
def test_box_vagrantfile_is_valid_ruby():
    ruby = system_tool("ruby")
    res = subprocess.run([ruby, "-c", str(ROOT / "vagrant" / "box" / "ubuntu.Vagrantfile")],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0 and "Syntax OK" in res.stdout, res.stderr


# ------------------------------------------------------------------ static rules on the steps


@pytest.mark.parametrize("script", STEP_SCRIPTS, ids=lambda p: p.name)
def test_every_step_has_the_common_header(script):
    text = script.read_text()
    assert text.startswith("#!/usr/bin/env bash\n")
    body = text.split('source "$K4W_LIB"', 1)[0] + 'source "$K4W_LIB"'  # everything up to the library
    assert "set -Eeuo pipefail" in body
    assert re.search(r"^trap '.*\$\{LINENO\}.*\$\{BASH_COMMAND\}.*' ERR$", body, re.M)
    assert 'source "$K4W_LIB"' in body


def _in_order(text: str, *pieces: str) -> bool:
    """Whether the pieces occur in this order (each searched after the previous one)."""
    position = 0
    for piece in pieces:
        position = text.find(piece, position)
        if position < 0:
            return False
        position += len(piece)
    return True


def _function(text: str, name: str) -> str:
    match = re.search(rf"^{name}\(\) \{{\n(.*?)^\}}", text, re.M | re.S)
    assert match, f"function {name} not found"
    return match.group(1)


def test_only_the_library_talks_to_the_network():
    allowed = ("curl --fail", "curl --noproxy '*' --fail")  # k4w_fetch, k4w_build_host_copy
    for script in OWN_SCRIPTS:
        for number, line in enumerate(script.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            # A command in command position (line start, after a pipe, ; && || or $( ).
            if re.search(r"(^|[|;&]|\$\()\s*(curl|wget)\s", code) and not (script.name == "lib.sh" and any(a in code for a in allowed)):
                pytest.fail(f"{script.name}:{number} downloads outside k4w_fetch and k4w_component_file: {line.strip()}")


def test_every_fetch_is_followed_by_a_checksum_or_fingerprint_check():
    """A component from the build host is checked before anything can use it, and k4w_fetch is
    only used where a fingerprint check follows."""
    lib = (STEPS.parent / "lib.sh").read_text()
    assert "curl --noproxy" in _function(lib, "k4w_build_host_copy")
    component = _function(lib, "k4w_component_file")
    assert _in_order(component, "k4w_component_digest", "k4w_build_host_copy", 'k4w_digest_of "$part" "$expected"',
                     '!= "$expected"', 'rm -f "$part"', "k4w_die", 'mv -f "$part"'), \
        "pinned digest -> copy from the build host -> digest -> compare -> delete and fail -> move into place"
    # An image archive has no digest of its own known at render time: the image it holds does, once imported.
    imported = _function(lib, "k4w_import_images")
    assert _in_order(imported, "k4w_build_host_copy", "images import", 'got="$(k4w_image_digest ctr "$name")"',
                     'if [[ $got != "$digest" ]]', "images rm", "k4w_die"), \
        "copy from the build host -> import -> the name's digest -> compare -> remove and fail"
    # Docker keeps no manifest: the archive carries the pinned one, which must hash to the digest, and the
    # loaded image's ID must be the config that manifest names.
    loaded = _function(lib, "k4w_load_images")
    assert _in_order(loaded, "k4w_build_host_copy", 'k4w_digest_of "$manifest" "${digest:7}"', '!= "${digest:7}"', "k4w_die",
                     "docker load", "docker image inspect", 'if [[ $got != "$config" ]]', "docker image rm", "k4w_die"), \
        "copy from the build host -> the manifest's digest -> compare and fail -> load -> the image ID -> compare -> remove and fail"
    copiers = {name for name in re.findall(r"^(k4w_\w+)\(\) \{", lib, re.M)
               if name != "k4w_build_host_copy" and "k4w_build_host_copy" in _function(lib, name)}
    assert copiers == {"k4w_component_file", "k4w_import_images", "k4w_load_images"}, copiers
    assert not [step.name for step in STEPS.glob("*.sh") if "k4w_build_host_copy" in step.read_text()], \
        "the steps copy from the build host only through those three"
    callers = {}
    for script in OWN_SCRIPTS:
        for line in script.read_text().splitlines():
            if re.search(r"\bk4w_fetch\b", line.split("#", 1)[0]) and "k4w_fetch()" not in line:
                callers.setdefault(script.name, []).append(line.strip())
    assert set(callers) == {"03-docker.sh"}, callers
    keyring = _function((STEPS / "03-docker.sh").read_text(), "docker_keyring")
    assert _in_order(keyring, "k4w_fetch", "--import", 'if [[ $actual != "$expected" ]]', "k4w_die", "k4w_install_file"), \
        "fetch key -> import -> compare fingerprint -> fail -> install keyring"


@pytest.mark.parametrize("box", sorted(p.stem for p in (ROOT / "boxes").glob("ubuntu-*.yml")))
def test_components_reach_the_steps_only_through_k4w_component_file(box):
    """The steps a profile runs install exactly its downloads, each through k4w_component_file
    (directly, or lib.sh's k4w_install_node_binaries for the node tarball)."""
    data = yaml.safe_load((ROOT / "boxes" / f"{box}.yml").read_text())
    texts = [(STEPS / step).read_text() for step in data["provision"]]
    used = sorted({name for text in texts for name in re.findall(r"k4w_component_file (\w+)", text)}
                  | ({"kubernetes"} if any("k4w_install_node_binaries " in text for text in texts) else set()))
    assert used == sorted(name for name, spec in data["components"].items() if spec.get("url"))


def test_every_download_in_the_profile_has_a_checksum():
    for name, component in yaml.safe_load(PROFILE.read_text())["components"].items():
        if "url" in component:
            assert component.get("sha256") or component.get("sha512"), name  # the guest checks a pinned digest
            if component.get("sha256"):
                assert re.fullmatch(r"[0-9a-f]{64}", component["sha256"]), name
            if component.get("sha512"):
                assert re.fullmatch(r"[0-9a-f]{128}", component["sha512"]), name
        else:  # apt packages: the repository must be pinned to a signing key
            assert name == "docker" and re.fullmatch(r"[0-9A-F]{40}", component["gpg_fingerprint"])
