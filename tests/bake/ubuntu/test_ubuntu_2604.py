"""boxes/ubuntu-2604.yml (Ubuntu 26.04 LTS) through the real commands: its seed is held against the
autoinstall schema of subiquity 26.04 (the installer on its ISO), the guest steps accept its release,
and nothing rendered for it assumes cgroup v1 (k4w/validate/cgroup_rules.py), each with a planted
wrong value refused."""

from __future__ import annotations

import hashlib
import re
import shutil

import pytest
import yaml

from k4w.model import profiles
from k4w.infra import sources
from k4w.validate import autoinstall_rules, cgroup_rules
from tests.bake.ubuntu.conftest import make_root, run_step
from tests.helpers import ROOT, invoke

BOX = "ubuntu-2604"
MODERN = ROOT / "examples" / "cluster-modern.yml"
UBUNTU_BOXES = sorted(p.stem for p in (ROOT / "boxes").glob("ubuntu-*.yml"))


def _boxes_with(tmp_path, edit) -> dict:
    folder = tmp_path / "boxes"
    shutil.copytree(ROOT / "boxes", folder)
    path = folder / f"{BOX}.yml"
    data = yaml.safe_load(path.read_text())
    edit(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return {sources.BOX_DIRS_ENV: str(folder)}


def _validate(tmp_path, env=None, *extra):
    result = invoke("validate", "--config", str(MODERN), "--out", str(tmp_path / "out"), *extra, env=env)
    return result, " ".join((result.stdout + result.stderr).split())


# ------------------------------------------------------------------ the profile's pinned facts

def test_the_iso_is_the_2604_release_media_with_its_checksum_source():
    iso = profiles.load(BOX).data.iso
    assert iso.name == "ubuntu-26.04-live-server-amd64.iso" and iso.url.endswith("/26.04/" + iso.name)
    assert iso.superseded_url == "https://old-releases.ubuntu.com/releases/26.04/" + iso.name
    assert iso.sha256 == "dec49008a71f6098d0bcfc822021f4d042d5f2db279e4d75bdd981304f1ca5d9"
    assert "rgl/ubuntu-vagrant ubuntu.pkr.hcl at b5b707b1c13f" in iso.sha256_source


def test_the_kernel_is_the_virtual_flavour_whose_kvp_daemon_the_seed_installs():
    installer = profiles.load(BOX).data.installer
    assert installer.kernel == "linux-image-virtual"
    assert {"linux-image-virtual", "linux-tools-virtual", "linux-cloud-tools-virtual"} <= set(installer.packages)
    assert autoinstall_rules.kernel_problems({"kernel": {"package": installer.kernel}, "packages": list(installer.packages)}) == []


# ------------------------------------------------------------------ the seed against subiquity 26.04's schema

def test_the_vendored_2604_schema_is_subiquitys_file_at_the_recorded_tag():
    origin = autoinstall_rules.source("26.04")
    assert (origin["repository"], origin["path"], origin["tag"]) == ("canonical/subiquity", "autoinstall-schema.json", "26.04")
    assert origin["commit"] == "9b41f1418858e38f88ba2724f540389b3fa41a0a"
    assert hashlib.sha256(autoinstall_rules.schema_path("26.04").read_bytes()).hexdigest() == origin["sha256"]


def test_each_release_judges_by_its_own_schema():
    # identity.groups exists from subiquity 26.04 on; 24.04.4's identity allows no other key.
    text = "#cloud-config\nautoinstall:\n  version: 1\n  identity: {hostname: h, username: u, password: p, groups: [docker]}\n"
    assert autoinstall_rules.check_user_data(text, "26.04") == []
    assert autoinstall_rules.check_user_data(text) == ["autoinstall.identity: Additional properties are not allowed ('groups' was unexpected)"]


@pytest.mark.parametrize("release, problem", [
    ("27.04", "no autoinstall schema of subiquity 27.04 is vendored"),
    ("../../etc/x", "installer.subiquity '../../etc/x' is not a subiquity release tag"),
])
def test_a_release_without_a_vendored_schema_is_a_problem_not_a_pass(release, problem):
    problems = autoinstall_rules.check_user_data("#cloud-config\nautoinstall:\n  version: 1\n", release)
    assert len(problems) == 1 and problems[0].startswith(problem), problems


@pytest.mark.tools
def test_validate_checks_the_2604_seed_against_subiquity_2604_and_refuses_an_unknown_release(tmp_path):
    dry = invoke("validate", "--config", str(MODERN), "--out", str(tmp_path / "dry"), "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert f"{tmp_path / 'dry' / 'http' / BOX / 'user-data'} autoinstall section against canonical/subiquity autoinstall-schema.json at 26.04" in dry.stdout
    env = _boxes_with(tmp_path, lambda d: d["installer"].update(subiquity="27.04"))
    result, output = _validate(tmp_path, env)
    assert result.returncode == 1 and "Traceback" not in output, output
    assert f"http/{BOX}/user-data: no autoinstall schema of subiquity 27.04 is vendored" in output, output


# ------------------------------------------------------------------ the guest steps accept the release

@pytest.mark.parametrize("box", UBUNTU_BOXES)
def test_the_guest_steps_run_on_every_ubuntu_profiles_release(tmp_path, box):
    """The release a profile's ISO installs (ubuntu-XX.YY in its name) is one lib.sh's distro guard
    accepts: 02-kernel.sh, run on a root with that os-release, succeeds."""
    release = re.match(r"ubuntu-(\d\d\.\d\d)", profiles.load(box).data.iso.name).group(1)
    result = run_step("02-kernel.sh", make_root(tmp_path, f"ubuntu-{release}"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_release_the_steps_do_not_know_is_refused_by_name(tmp_path):
    result = run_step("02-kernel.sh", make_root(tmp_path, "ubuntu-28.04"))
    assert result.returncode != 0 and "unsupported distribution 'ubuntu 28.04'" in result.stderr


# ------------------------------------------------------------------ cgroup v2 only

def test_the_2604_box_declares_cgroup_v2_only_and_uses_the_systemd_driver():
    data = profiles.load(BOX).data
    assert data.cgroup_v2_only is True and data.components.containerd.cgroup_driver == "systemd"


def test_a_v1_switch_in_a_guest_script_or_rendered_file_is_named(tmp_path):
    script = tmp_path / "02-kernel.sh"
    script.write_text('GRUB_CMDLINE_LINUX="systemd.unified_cgroup_hierarchy=0"\n')
    problems = cgroup_rules._marker_problems([script], "in a guest script")
    assert problems == [f"{script}: asks for the cgroup v1 hierarchy (systemd.unified_cgroup_hierarchy=0) in a guest script"]


@pytest.mark.tools
@pytest.mark.parametrize("edit, message", [
    (lambda d: d["components"]["containerd"].update(cgroup_driver="cgroupfs"),
     "ubuntu-2604.yml: components.containerd.cgroup_driver is cgroupfs, but this box is cgroup v2 only (cgroup_v2_only): use systemd"),
    (lambda d: d["installer"]["packages"].append("systemd.unified_cgroup_hierarchy=0"),
     "asks for the cgroup v1 hierarchy (systemd.unified_cgroup_hierarchy=0) in a file rendered for ubuntu-2604, which is cgroup v2 only"),
], ids=["cgroupfs-driver", "v1-switch-in-seed"])
def test_invoke_validate_refuses_a_cgroup_v1_assumption_on_the_2604_box(tmp_path, edit, message):
    result, output = _validate(tmp_path, _boxes_with(tmp_path, edit))
    assert result.returncode == 1 and "Traceback" not in output, output
    assert "✗ cgroup v2 only boxes" in output and message in output, output


def test_the_2404_box_does_not_declare_it_so_its_cgroupfs_would_stay_its_own_choice():
    assert not profiles.load("ubuntu-2404").data.get("cgroup_v2_only")


# ------------------------------------------------------------------ the runtime step on a 26.04 root

def test_the_containerd_step_writes_a_systemd_cgroup_config_on_a_2604_root_and_the_real_containerd_reads_it(tmp_path):
    """03-containerd.sh with ubuntu-2604's own step variables on a root whose os-release is 26.04:
    the config it writes uses the systemd cgroup driver, and the pinned real containerd reads it
    with the box spec's expectations for this profile."""
    import hashlib
    import subprocess

    from k4w.derive import step_env as derive_steps
    from k4w.infra import pinned_tools
    from k4w.verify import expect
    from tests.bake.ubuntu.conftest import cluster
    from tests.bake.ubuntu.test_ubuntu_containerd_era_steps import BUILDERS
    from tests.fakes import local_http

    profile = profiles.load(BOX)
    env = {k: v for k, v in derive_steps.step_env(profile, cluster()).env.items() if k.startswith("K4W_") and k != "K4W_LIB"}
    assert env["K4W_CONTAINERD_CGROUP_DRIVER"] == "systemd"
    files, digests = {}, {}
    for component, build in BUILDERS.items():
        body = build(profile.data.components[component].version)
        files[env["K4W_MEDIA_URL_PATH"] + env[f"K4W_{component.upper()}_FILE"]] = body
        key = "SHA512" if component == "kubernetes" else "SHA256"
        digests[f"K4W_{component.upper()}_{key}"] = getattr(hashlib, key.lower())(body).hexdigest()
    root = make_root(tmp_path, "ubuntu-26.04")
    with local_http.site(files) as site:
        result = run_step("03-containerd.sh", root, **{**env, **digests, "PACKER_HTTP_ADDR": site.url.removeprefix("http://")})
    assert result.returncode == 0, result.stderr
    config = root / "etc" / "containerd" / "config.toml"
    assert "SystemdCgroup = true" in config.read_text()
    containerd = pinned_tools.require("containerd", "containerd")
    dump = subprocess.run([str(containerd), "--config", str(config), "config", "dump"], capture_output=True, text=True, timeout=60)
    assert dump.returncode == 0, dump.stderr
    assert expect.containerd_config_problems(dump.stdout, profile, effective=True) == []


def test_a_docker_era_profile_marked_v2_only_is_refused_for_its_driver_and_its_docker():
    """The Docker era's ubuntu-1604 could never be cgroup v2 only: Docker 17.03 predates v2 (20.10)."""
    problems = cgroup_rules._profile_problems("ubuntu-1604.yml", profiles.load("ubuntu-1604").data)
    assert problems == [
        "ubuntu-1604.yml: components.docker.cgroup_driver is cgroupfs, but this box is cgroup v2 only (cgroup_v2_only): "
        "use systemd, which owns the cgroup tree there",
        "ubuntu-1604.yml: components.docker 17.03.2 predates cgroup v2 support (Docker 20.10), and this box is cgroup v2 only"]
