"""The windows-2022 box (containerd era) through the real commands: a config with it renders and
passes `invoke validate`, refuses host-gw, and its build names the one pin the user must make.
Plus the profile's pinned facts and the Packer steps of its node recipe."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from k4w.infra.sources import REPO_ROOT as ROOT
from k4w.validate import checksum_rules
from tests.helpers import config_dict, invoke, write_config

BOX = "windows-2022"
PROFILE = yaml.safe_load((ROOT / "boxes" / f"{BOX}.yml").read_text())
GUEST = ROOT / "guest" / "windows"
# The Windows box with its own era's master: its HostProcess DaemonSets need an API server >= 1.26.
MODERN = {"network.backend": "vxlan", "nodes.0.box": "ubuntu-2404", "nodes.1.box": "ubuntu-2404", "nodes.2.box": BOX}


@pytest.fixture
def modern_config(tmp_path):
    return write_config(tmp_path / "cluster.yml", config_dict(**MODERN))


def test_a_config_with_windows_2022_renders_and_passes_validate(modern_config, tmp_path):
    out = tmp_path / "out"
    result = invoke("validate", "--config", str(modern_config), "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "validation failed" not in result.stdout
    node = out / "nodes" / "worker-win"
    assert sorted(p.name for p in node.iterdir()) == sorted(p.stem for p in (ROOT / "templates" / "nodes" / "windows-containerd").glob("*.j2"))
    info = json.loads((node / "node.json").read_text())
    assert (info["runtime_service"], info["runtime_endpoint"]) == ("containerd", "npipe:////./pipe/containerd-containerd")
    assert (out / "packer" / f"{BOX}.pkr.hcl").is_file() and (out / "http" / BOX / "Autounattend.xml").is_file()


def test_host_gw_with_windows_2022_is_refused_naming_the_field_and_nothing_is_written(tmp_path):
    config = write_config(tmp_path / "cluster.yml", config_dict(**{"nodes.0.box": "ubuntu-2404", "nodes.1.box": "ubuntu-2404", "nodes.2.box": BOX}))  # host-gw is the default
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine\n")
    result = invoke("render", "--config", str(config), "--out", str(out))
    assert result.returncode != 0
    message = " ".join((result.stdout + result.stderr).split())
    assert "network.backend: host-gw is not supported by box windows-2022" in message and "use vxlan" in message
    assert "Traceback" not in result.stderr
    # Only k4w's own lock file (one command per --out) may appear beside what was there.
    assert {p.name for p in out.iterdir()} - {".lock"} == {"keep.txt"} and (out / "keep.txt").read_text() == "mine\n"


def test_the_build_refuses_until_flanneld_is_pinned_and_says_how(modern_config, tmp_path):
    result = invoke("build-windows", "--config", str(modern_config), "--out", str(tmp_path / "out"), "--dry-run")
    output = " ".join((result.stdout + result.stderr).split())
    assert f"components.flannel (0.28.10) of {BOX} has no checksum" in output
    assert f"run: invoke pin {BOX} flannel --config {modern_config}" in output
    # The published checksum files are for the host's fetch; the guest needs a digest pinned at render time.
    # The Update Catalog publishes no sha256 either: the cumulative update is pinned the same way.
    assert f"run: invoke pin {BOX} windows_update --config {modern_config}" in output
    for component in ("containerd", "cni", "flannel_cni", "crictl"):
        assert f"components.{component} of {BOX} is checked only against" in output
        assert f"run: invoke pin {BOX} {component} --config {modern_config}" in output
    assert "Traceback" not in result.stderr


# The pin section moved from the README to the docs page on downloads (issue 34).
def test_the_downloads_page_shows_the_pin_command():
    assert f"invoke pin {BOX} flannel" in (ROOT / "docs" / "downloads.md").read_text()


# ------------------------------------------------------------------ the profile's pinned facts

def test_the_iso_is_the_public_evaluation_media_pinned_with_its_sources():
    iso = PROFILE["iso"]
    assert iso["url"] == ("https://software-static.download.prss.microsoft.com/sg/download/888969d5-f34g-4e03-ac9d-1f9786c66749/"
                          "SERVER_EVAL_x64FRE_en-us.iso")
    assert iso["sha256"] == "3e4fa6d8507b554856fc9ca6079cc402df11a8b79344871669f0251535255325"
    for project in ("rgl/windows-vagrant", "chef/bento", "StefanScherer/packer-windows"):
        assert project in iso["sha256_source"]
    # Server Core by name, the WIM NAME Setup matches; no key on evaluation media.
    assert (iso["index"], iso["image_name"], iso["installation_type"]) == (3, "Windows Server 2022 SERVERDATACENTERCORE", "Server Core")
    assert iso["product_key"] is None
    assert PROFILE["build"]["generation"] == 2 and PROFILE["guest"]["os_build"] == 20348


def test_every_component_is_checked_or_left_to_the_users_pin():
    components = PROFILE["components"]
    assert set(components) == {"kubernetes", "containerd", "cni", "flannel_cni", "crictl", "flannel", "nssm", "windows_update"}
    assert components["kubernetes"]["version"] == PROFILE["kubernetes"]["version"] == "1.37.2"
    # The 1.37.2 Windows node tarball's sha512, as the v1.37.2 release notes list it (CHANGELOG-1.37.md,
    # read from k8s.io/kubernetes@v1.38.0-beta.0: the copy at the tag ends at 1.37.1).
    assert components["kubernetes"]["sha512"] == ("d28802c32d09f1cbac711ad7e9f804901f797a61807814da9c673122a20ed3c2"
                                                  "a479d2520a3b77fb5cdd653d4fc4a4f6eeeba511d3295124a2bd8c4cd23e5c53")
    assert "CHANGELOG-1.37.md" in components["kubernetes"]["checksum_source"]
    patterns = checksum_rules.published_patterns()
    for name, spec in components.items():
        if name in ("flannel", "windows_update"):
            assert not any(spec.get(k) for k in ("sha256", "sha512", "sha256_url"))  # the user pins it
            continue
        assert spec["checksum_source"], name
        if spec.get("sha256_url"):
            assert spec["sha256_url"].startswith(spec["url"]) and any(p.fullmatch(spec["sha256_url"]) for p in patterns), name


def test_the_pause_image_reaches_containerd_and_not_the_kubelet():
    assert PROFILE["kubernetes"]["pause_image"] == "registry.k8s.io/pause:3.10.2"
    kubelet_args = (ROOT / "templates" / "nodes" / "windows-containerd" / "kubelet.args.j2").read_text()
    assert not re.search(r"^--pod-infra-container-image", kubelet_args, re.M)
    assert "$pauseImage = Get-K4wEnv -Name 'K4W_PAUSE_IMAGE'" in (GUEST / "bake" / "03-containerd.ps1").read_text()


# ------------------------------------------------------------------ the Packer steps of the recipe

def test_the_packer_steps_follow_the_profile_and_upload_the_recipe_after_the_shared_node_files(render_windows):
    packer = render_windows(2, box=BOX).packer
    steps = []
    for prov in packer["provisioners"][1:]:
        if prov["type"] == "powershell":
            steps.append(prov["script"].rsplit("/", 1)[1])
        elif prov["type"] == "windows-restart":
            steps.append("restart")
        elif prov.get("direction") == "download":
            steps.append("fetch-release")
        else:
            steps.append("upload:" + prov["source"].rstrip("/").rsplit("/", 1)[1])
    wanted = [s if s != "upload" else "upload:node" for s in PROFILE["provision"]]
    wanted.insert(wanted.index("upload:node") + 1, "upload:node-containerd")
    assert steps == wanted
    # The features need their reboot before containerd; C:\k holds the recipe before 08 registers services.
    assert steps.index("02-windows-features.ps1") < steps.index("restart", steps.index("02-windows-features.ps1")) < steps.index("03-containerd.ps1")
    assert steps.index("upload:node-containerd") < steps.index("08-node-services.ps1")
    # The cumulative update goes in first, with a restart of its own before anything else is enabled;
    # the record the host fetches is the one 11 wrote, before cleanup.
    assert steps[steps.index("02-windows-update.ps1") + 1] == "restart"
    assert steps.index("02-windows-update.ps1") < steps.index("02-windows-features.ps1")
    assert steps.index("11-box-release.ps1") < steps.index("fetch-release") < steps.index("12-cleanup.ps1")


def test_the_kubelet_service_runs_the_recipes_launcher_after_containerd(render_windows):
    env = render_windows(2, box=BOX).env("08-node-services.ps1")
    assert (env["K4W_CONTAINER_RUNTIME"], env["K4W_KUBELET_LAUNCHER"]) == ("containerd", "start-kubelet.ps1")
    assert (GUEST / "node-containerd" / env["K4W_KUBELET_LAUNCHER"]).is_file()
    seed = render_windows(2).env("08-node-services.ps1")
    assert seed["K4W_CONTAINER_RUNTIME"] == "docker" and "K4W_KUBELET_LAUNCHER" not in seed


def test_hyper_v_is_enabled_without_the_hypervisor_check_and_the_hypervisor_stays_off():
    script = (GUEST / "bake" / "02-windows-features.ps1").read_text()
    assert "Install-WindowsFeature -Name 'Containers'" in script
    enable = script.index("'/Enable-Feature', '/FeatureName:Microsoft-Hyper-V', '/All'")
    disable = script.index("'/Disable-Feature', '/FeatureName:Microsoft-Hyper-V-Online'")
    assert enable < disable
    assert "Install-WindowsFeature -Name 'Hyper-V'" not in script  # that one checks the CPU and fails
    for cite in ("sig-windows-tools", "f3fa3944", "image-builder", "nested virtualization"):
        assert cite in script
