"""The rendered Windows Packer template: what packer 1.6.6 accepts, and what a user of the
box would notice (secure boot, switch, provisioner order, proxy, secrets)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from k4w import iso, profiles
from k4w.sources import REPO_ROOT as ROOT
from k4w.errors import K4wError
from tests.helpers import system_tool

from windows_fixtures import BOX, HTTP_PROXY, HTTPS_PROXY, PROXY_PASSWORD, SECRET

GUEST = ROOT / "guest" / "windows"
# What the Packer build runs or uploads: Setup bootstrap, bake steps, the shared library.
BOX_BUILD_SCRIPTS = sorted([*(GUEST / "setup").glob("*.ps1"), *(GUEST / "bake").glob("*.ps1"), GUEST / "common.ps1"])

# The order the guest work must happen in (docs/internals.md; brief of the Windows box).
EXPECTED_ORDER = [
    ("file", "common.ps1"),
    ("powershell", "00-preflight.ps1"),
    ("powershell", "01-proxy.ps1"),
    ("powershell", "02-containers-feature.ps1"),
    ("windows-restart", None),
    ("powershell", "03-docker.ps1"),
    ("powershell", "04-container-images.ps1"),
    ("powershell", "05-kubernetes-node.ps1"),
    ("powershell", "06-cni-flannel.ps1"),
    ("powershell", "07-nssm.ps1"),
    ("file", "node"),
    ("powershell", "08-node-services.ps1"),
    ("powershell", "09-firewall.ps1"),
    ("powershell", "10-defender-exclusions.ps1"),
    ("powershell", "11-box-release.ps1"),
    ("powershell", "12-cleanup.ps1"),
]


def _packer() -> str:
    return system_tool("packer")


def _validate(out: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, K4W_ADMIN_PASSWORD=SECRET, CHECKPOINT_DISABLE="1")
    return subprocess.run([_packer(), "validate", str(out / "packer" / f"{BOX}.json")],
                          capture_output=True, text=True, env=env, timeout=60)


@pytest.mark.tools
@pytest.mark.parametrize("proxied", [False, True], ids=["direct", "proxy"])
def test_packer_validate_accepts_the_rendered_template(render_windows, generation, proxied):
    rendered = render_windows(generation, http=HTTP_PROXY if proxied else None,
                              https=HTTPS_PROXY if proxied else None, write=True)
    result = _validate(rendered.out)
    assert result.returncode == 0, result.stdout + result.stderr
    # Only the expected warning (ISO not registered yet) may remain.
    assert "unknown configuration key" not in result.stdout + result.stderr


@pytest.mark.tools
def test_packer_validate_rejects_a_broken_template(render_windows):
    """The validation above can fail: an unknown builder key is refused."""
    rendered = render_windows(2, write=True)
    path = rendered.out / "packer" / f"{BOX}.json"
    path.write_text(path.read_text().replace('"headless": true', '"headless": true, "not_a_hyperv_key": 1'))
    result = _validate(rendered.out)
    assert result.returncode != 0 and "not_a_hyperv_key" in result.stdout + result.stderr


def test_provisioners_run_in_the_documented_order(render_windows):
    provisioners = render_windows(2).packer["provisioners"]
    seen = []
    for prov in provisioners:
        source = prov.get("script") or prov.get("source")
        seen.append((prov["type"], Path(source.rstrip("/")).name if source else None))
    assert seen == EXPECTED_ORDER


def test_every_guest_script_is_run_and_exists(render_windows):
    rendered = render_windows(2)
    run = [Path(p["script"]) for p in rendered.packer["provisioners"] if p["type"] == "powershell"]
    for script in run:
        assert script.is_file(), script
    numbered = sorted(p.name for p in (GUEST / "bake").glob("[0-9][0-9]-*.ps1"))
    assert sorted(s.name for s in run) == numbered, "a numbered script is not run, or a run script is missing"
    node = [p for p in rendered.packer["provisioners"] if p["type"] == "file" and p["source"].endswith("/node/")]
    assert node and node[0]["destination"] == "C:\\k\\"
    assert (GUEST / "node" / "kube-cleanup.ps1").is_file()


def test_gen2_boots_uefi_with_secure_boot_and_setup_files_on_cd(render_windows):
    builder = render_windows(2).packer["builders"][0]
    assert builder["type"] == "hyperv-iso" and builder["generation"] == 2
    assert builder["enable_secure_boot"] is True
    assert builder["secure_boot_template"] == "MicrosoftWindows"
    assert "floppy_files" not in builder  # Gen2 has no floppy controller
    names = [Path(p).name for p in builder["cd_files"]]
    assert names == ["Autounattend.xml", "k4w-bootstrap.ps1", "common.ps1"]


def test_gen1_has_no_secure_boot_and_uses_a_floppy(render_windows):
    builder = render_windows(1).packer["builders"][0]
    assert builder["generation"] == 1
    assert not {"enable_secure_boot", "secure_boot_template", "cd_files"} & set(builder)
    assert [Path(p).name for p in builder["floppy_files"]] == ["Autounattend.xml", "k4w-bootstrap.ps1", "common.ps1"]


def test_an_unknown_generation_stops_the_render(render_windows):
    with pytest.raises(K4wError, match="build_generation_must_be_1_or_2"):
        render_windows(3)


def test_vm_settings_come_from_profile_and_config(render_windows):
    rendered = render_windows(2)
    builder = rendered.packer["builders"][0]
    build = rendered.profile.build
    assert builder["switch_name"] == rendered.cfg.hyperv.management_switch
    assert (builder["cpus"], builder["memory"], builder["disk_size"]) == (build.cpus, build.memory_mb, build.disk_gb * 1024)
    assert builder["enable_dynamic_memory"] is False
    # Neither is needed during the build (see the template's comment); the cluster sets MAC spoofing.
    assert builder["enable_mac_spoofing"] is False and builder["enable_virtualization_extensions"] is False
    assert builder["output_directory"] == f"{rendered.out}/packer-vm/{BOX}"
    assert builder["boot_command"] and all("<spacebar>" in line for line in builder["boot_command"])


def test_winrm_is_https_ntlm_as_administrator(render_windows):
    builder = render_windows(2).packer["builders"][0]
    assert builder["communicator"] == "winrm"
    assert builder["winrm_username"] == "Administrator"
    assert builder["winrm_password"] == "{{user `admin_password`}}"
    assert (builder["winrm_use_ssl"], builder["winrm_insecure"], builder["winrm_use_ntlm"], builder["winrm_port"]) == (True, True, True, 5986)


def test_the_box_post_processor_writes_a_partial_box_with_the_windows_vagrantfile(render_windows):
    rendered = render_windows(2)
    [post] = rendered.packer["post-processors"]
    assert post["type"] == "vagrant"
    assert post["output"] == f"{rendered.out}/boxes/.partial/{BOX}-{{{{.Provider}}}}.box"
    assert post["vagrantfile_template"] == str(ROOT / "vagrant" / "box" / "windows.Vagrantfile")


def test_iso_checksum_is_the_known_sha256_or_none(render_windows, profile_dir):
    known = iso.iso_sha256(profiles.load(BOX))  # iso/catalogue.yml may already list the user's ISO
    assert render_windows(2).packer["builders"][0]["iso_checksum"] == (f"sha256:{known}" if known else "none")
    digest = "ab" * 32
    profile_dir(lambda data: data["iso"].__setitem__("sha256", digest))
    assert render_windows(2).packer["builders"][0]["iso_checksum"] == f"sha256:{digest}"


def test_no_secret_in_the_rendered_template(render_windows, generation):
    rendered = render_windows(generation)
    text = rendered.packer_text
    assert SECRET not in text
    assert rendered.packer["variables"]["admin_password"] == "{{env `K4W_ADMIN_PASSWORD`}}"
    assert "admin_password" in rendered.packer["sensitive-variables"]
    # ...while the answer file does carry it (encoded), which is how Setup gets it.
    assert SECRET not in rendered.unattend


def test_without_a_proxy_no_proxy_value_reaches_the_guest(render_windows):
    rendered = render_windows(2)
    env = rendered.env("03-docker.ps1")
    assert env["K4W_PROXY_ENABLED"] == "0"
    assert not {"K4W_HTTP_PROXY", "K4W_HTTPS_PROXY", "K4W_NO_PROXY"} & set(env)
    assert not {"http_proxy", "https_proxy"} & set(rendered.packer["variables"])


def test_proxy_values_reach_every_script_and_are_masked(render_windows):
    rendered = render_windows(2, http=HTTP_PROXY, https=HTTPS_PROXY)
    variables = rendered.packer["variables"]
    assert variables["http_proxy"] == HTTP_PROXY and variables["https_proxy"] == HTTPS_PROXY
    assert {"http_proxy", "https_proxy"} <= set(rendered.packer["sensitive-variables"])
    for prov in rendered.packer["provisioners"]:
        if prov["type"] != "powershell":
            continue
        env = dict(item.split("=", 1) for item in prov["environment_vars"])
        assert env["K4W_PROXY_ENABLED"] == "1"
        assert env["K4W_HTTP_PROXY"] == "{{user `http_proxy`}}"
        assert env["K4W_HTTPS_PROXY"] == "{{user `https_proxy`}}"
        assert env["K4W_NO_PROXY"] == rendered.proxy.no_proxy_str
    # The credentials live only in the sensitive variable, never in an environment line.
    assert rendered.packer_text.count(PROXY_PASSWORD) == 1


def test_https_proxy_is_never_taken_from_http(render_windows):
    rendered = render_windows(2, http=HTTP_PROXY)
    env = rendered.env("01-proxy.ps1")
    assert "K4W_HTTP_PROXY" in env and "K4W_HTTPS_PROXY" not in env
    assert "https_proxy" not in rendered.packer["variables"]


def test_every_value_a_script_reads_is_provided(render_windows):
    """Each K4W_* name a guest script asks for is in the provisioner environment."""
    rendered = render_windows(2, http=HTTP_PROXY, https=HTTPS_PROXY)
    env = rendered.env("00-preflight.ps1")
    optional = {"K4W_HTTP_PROXY", "K4W_HTTPS_PROXY", "K4W_NO_PROXY"}
    for script in BOX_BUILD_SCRIPTS:
        if script.name.startswith("cluster-"):
            continue  # cluster-up scripts, not part of the box build
        for name in set(re.findall(r"'(K4W_[A-Z0-9_]+)'", script.read_text())):
            assert name in env or name in optional, f"{script.name} reads {name}, which templates/packer/windows.json.j2 does not set"
    components = rendered.profile.components
    assert env["K4W_COMPONENTS"] == ",".join(components)
    for name, spec in components.items():
        prefix = f"K4W_{name.upper()}_"
        assert env[prefix + "VERSION"] == str(spec["version"]) and env[prefix + "URL"] == spec["url"]
        for key in ("sha256", "sha256_url", "sha512"):
            assert env[prefix + key.upper()] == (spec.get(key) or "")


def test_values_that_may_be_empty_are_read_as_optional(render_windows):
    """Windows deletes an environment variable set to "", so a null checksum arrives *unset*:
    every K4W_* name the template may render empty must be read with Get-K4wEnv -Optional."""
    env = render_windows(2).env("00-preflight.ps1")
    empty = {name for name, value in env.items() if value == ""}
    assert empty, "the default profile has null checksums; this test needs one"
    # Names a script may build at run time ("K4W_$X_SHA256"): match on what they end with.
    endings = {re.sub(r"^K4W_[A-Z0-9]+?_(SHA256_URL|SHA256|SHA512)$", r"\1", name) for name in empty}
    for script in BOX_BUILD_SCRIPTS:
        for line in script.read_text().splitlines():
            named = re.search(r"Get-K4wEnv\s+-Name\s+['\"]([^'\"]+)['\"]", line)
            if named and (named.group(1) in empty or named.group(1).endswith(tuple(endings))):
                assert "-Optional" in line, f"{script.name}: {line.strip()}"
