"""The windows-2025 box (Windows Server 2025, build 26100, containerd era) through the real commands:
a config with it renders and passes `invoke validate`, its Setup selects Datacenter Core by the WIM's
own NAME, its build names the pins the user must make, and its pinned facts name their sources."""

from __future__ import annotations

import re

import pytest
import yaml

from k4w.infra.sources import REPO_ROOT as ROOT
from k4w.validate import unattend_rules
from tests.helpers import invoke

BOX = "windows-2025"
PROFILE = yaml.safe_load((ROOT / "boxes" / f"{BOX}.yml").read_text())
WINDOWS_2022 = yaml.safe_load((ROOT / "boxes" / "windows-2022.yml").read_text())
GUEST = ROOT / "guest" / "windows"
MODERN = ROOT / "examples" / "cluster-modern.yml"


@pytest.fixture(scope="module")
def validated(tmp_path_factory):
    out = tmp_path_factory.mktemp("ws2025") / "out"
    result = invoke("validate", "--config", str(MODERN), "--out", str(out))
    return result, out


@pytest.mark.tools
def test_the_modern_example_with_windows_2025_passes_validate(validated):
    result, out = validated
    assert result.returncode == 0, result.stdout + result.stderr
    assert (out / "packer" / f"{BOX}.pkr.hcl").is_file()


@pytest.mark.tools
def test_setup_selects_datacenter_core_by_the_wims_own_name(validated):
    _, out = validated
    xml = (out / "http" / BOX / "Autounattend.xml").read_text()
    assert "<Key>/IMAGE/NAME</Key>" in xml and "<Value>Windows Server 2025 SERVERDATACENTERCORE</Value>" in xml
    assert unattend_rules.check_unattend(xml, 2, 3, image_name="Windows Server 2025 SERVERDATACENTERCORE") == []
    # The 2022 name on this file is what the structural rule refuses.
    assert unattend_rules.check_unattend(xml, 2, 3, image_name="Windows Server 2022 SERVERDATACENTERCORE")


@pytest.mark.tools
def test_the_packer_template_boots_uefi_with_microsofts_windows_secure_boot_template(validated):
    _, out = validated
    hcl = (out / "packer" / f"{BOX}.pkr.hcl").read_text()
    assert re.search(r"^\s*generation\s*=\s*2$", hcl, re.M)
    assert re.search(r'^\s*secure_boot_template\s*=\s*"MicrosoftWindows"$', hcl, re.M)


def test_the_build_refuses_until_the_unpublished_digests_are_pinned_and_says_how(tmp_path):
    result = invoke("build-windows", "--config", str(MODERN), "--out", str(tmp_path / "out"), "--dry-run")
    output = " ".join((result.stdout + result.stderr).split())
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert f"components.flannel (0.28.10) of {BOX} has no checksum" in output
    for component in ("flannel", "containerd", "cni", "flannel_cni", "crictl"):
        assert f"run: invoke pin {BOX} {component} --config {MODERN}" in output, component
    assert f"invoke pin {BOX} kubernetes" not in output  # its sha512 is pinned from the v1.37.2 release notes
    assert f"invoke pin {BOX} windows_update" not in output  # none is pinned for 2025


# ------------------------------------------------------------------ the profile's pinned facts

def test_the_iso_is_the_current_evaluation_media_with_its_sources_named():
    iso = PROFILE["iso"]
    assert iso["name"] == "26100.32230.260111-0550.lt_release_svc_refresh_SERVER_EVAL_x64FRE_en-us.iso"
    assert iso["url"].endswith("/" + iso["name"]) and iso["url"].startswith("https://software-static.download.prss.microsoft.com/")
    assert iso["sha256"] == "7b052573ba7894c9924e3e87ba732ccd354d18cb75a883efa9b900ea125bfd51"
    assert "rgl/windows-vagrant windows-evaluation-isos.json" in iso["sha256_source"] and "d59a88ce" in iso["sha256_source"]
    for project in ("chef/bento", "StefanScherer/packer-windows"):
        assert project in iso["sha256_source"]  # named, with the earlier media they pin
    assert (iso["index"], iso["image_name"], iso["installation_type"], iso["product_key"]) == (
        3, "Windows Server 2025 SERVERDATACENTERCORE", "Server Core", None)
    assert PROFILE["guest"]["os_build"] == 26100 and PROFILE["build"]["generation"] == 2


def test_the_node_stack_is_the_2022_profiles_except_what_2025_changes():
    for key in ("node_recipe", "supports_vxlan", "supports_host_gw", "cluster_nic_default_route", "runtime"):
        assert PROFILE[key] == WINDOWS_2022[key], key
    assert {k: v for k, v in PROFILE["kubernetes"].items() if k != "pause_image"} == \
        {k: v for k, v in WINDOWS_2022["kubernetes"].items() if k != "pause_image"}
    assert PROFILE["kubernetes"]["pause_image"] == "registry.k8s.io/pause:3.10.2"
    assert PROFILE["components"] == {k: v for k, v in WINDOWS_2022["components"].items() if k != "windows_update"}


def test_without_a_pinned_update_the_box_skips_the_update_step_and_says_why():
    assert "windows_update" not in PROFILE["components"] and "02-windows-update.ps1" not in PROFILE["provision"]
    # Why, as data `invoke validate` reads and dates (k4w/validate/patch_rules.py), not only a comment.
    reason = PROFILE["no_windows_update"]["reason"]
    assert "Update Catalog file" in reason and "KB5087539" in reason and PROFILE["no_windows_update"]["date"]
    # Everything else runs as on 2022, in the same order.
    assert PROFILE["provision"] == [s for i, s in enumerate(WINDOWS_2022["provision"])
                                    if s != "02-windows-update.ps1" and WINDOWS_2022["provision"][i - 1] != "02-windows-update.ps1"]


def test_a_26100_update_is_added_as_one_msu_from_a_folder_of_its_own():
    script = (GUEST / "bake" / "02-windows-update.ps1").read_text()
    assert "$checkpointServicingBuild = 26100" in script and "catalog-checkpoint-cumulative-updates.md" in script
    branch = script[script.index("if ([int]$osBuild -ge $checkpointServicingBuild) {"):script.index("} else {")]
    assert "Copy-Item -LiteralPath $msu -Destination $alone" in branch and '"/PackagePath:$alone"' in branch
    assert branch.index("Copy-Item") < branch.index("dism.exe")
