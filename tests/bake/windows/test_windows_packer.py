"""The rendered Windows Packer template: what the pinned Packer 1.9.4 with the hyperv plugin accepts, and what a user of the
box would notice (secure boot, switch, provisioner order, proxy, secrets)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from k4w.media import iso
from k4w.infra import packer_hcl
from k4w.model import profiles
from k4w.infra.sources import REPO_ROOT as ROOT
from k4w.infra.errors import K4wError
from tests.helpers import packer_validate, system_tool

from windows_fixtures import BOX, HTTP_PROXY, HTTPS_PROXY, PROXY_PASSWORD, PROXY_USER, SECRET

# Every Windows box profile in boxes/: each new one is covered without editing this file.
WINDOWS_BOXES = sorted(p.stem for p in (ROOT / "boxes").glob("windows-*.yml"))

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
    ("powershell", "09-node-acls.ps1"),
    ("powershell", "10-defender-exclusions.ps1"),
    ("powershell", "11-box-release.ps1"),
    ("file", "C:\\k\\box-release.json"),
    ("powershell", "12-cleanup.ps1"),
]


def _packer() -> str:
    return system_tool("packer")


def _validate(out: Path, box: str = BOX) -> subprocess.CompletedProcess:
    return packer_validate(out / "packer" / f"{box}.pkr.hcl", env={"K4W_ADMIN_PASSWORD": SECRET})


@pytest.mark.tools
def test_packer_validate_accepts_the_modern_template_with_its_update_restarts_and_record_download(render_windows):
    rendered = render_windows(2, box="windows-2022", write=True)
    result = _validate(rendered.out, "windows-2022")
    assert result.returncode == 0, result.stdout + result.stderr
    download = [p for p in rendered.packer["provisioners"] if p.get("direction") == "download"]
    assert [(p["type"], p["source"]) for p in download] == [("file", "C:\\k\\box-release.json")]
    # A download provisioner the real Packer refuses fails this check (the class check shown failing):
    path = rendered.out / "packer" / "windows-2022.pkr.hcl"
    path.write_text(path.read_text().replace('direction   = "download"', 'direction   = "sideways"'))
    broken = _validate(rendered.out, "windows-2022")
    assert broken.returncode != 0 and "Direction must be one of" in broken.stdout + broken.stderr


@pytest.mark.tools
def test_packer_validate_accepts_the_iso_path_a_build_with_iso_gives(render_windows, tmp_path):
    rendered = render_windows(2, write=True)
    elsewhere = tmp_path / "my images" / "windows.iso"
    path = rendered.out / "packer" / f"{BOX}.pkr.hcl"
    given = packer_validate(path, env={"K4W_ADMIN_PASSWORD": SECRET}, variables={"iso_path": str(elsewhere)})
    assert given.returncode == 0, given.stdout + given.stderr
    # Packer refuses a -var the template does not declare: the variable is what carries --iso.
    path.write_text(re.sub(r'variable "iso_path" \{[^}]*\}', "", path.read_text())
                    .replace("coalesce(var.iso_path, ", "coalesce(\"\", "))
    undeclared = packer_validate(path, env={"K4W_ADMIN_PASSWORD": SECRET}, variables={"iso_path": str(elsewhere)})
    assert undeclared.returncode != 0 and "Undefined -var variable" in undeclared.stdout + undeclared.stderr


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
    path = rendered.out / "packer" / f"{BOX}.pkr.hcl"
    path.write_text(path.read_text().replace("  headless ", "  not_a_hyperv_key = 1\n  headless ", 1))
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
    run = set()
    for box in WINDOWS_BOXES:
        rendered = render_windows(2, box=box)
        scripts = [Path(p["script"]) for p in rendered.packer["provisioners"] if p["type"] == "powershell"]
        for script in scripts:
            # Packer reads it from the rendered folder (OUT/packer/guest/), a copy of the checkout's guest/.
            shipped = script.relative_to(rendered.out).as_posix()
            assert shipped in rendered.files and (ROOT / shipped.removeprefix("packer/")).is_file(), script
        run |= {s.name for s in scripts}
        node = [p for p in rendered.packer["provisioners"] if p["type"] == "file" and p["source"].endswith("/node/")]
        assert node and node[0]["destination"] == "C:\\k\\"
    numbered = sorted(p.name for p in (GUEST / "bake").glob("[0-9][0-9]-*.ps1"))
    assert sorted(run) == numbered, "a numbered script is run by no Windows box, or a run script is missing"
    assert (GUEST / "node" / "kube-cleanup.ps1").is_file()


def test_gen2_boots_uefi_with_secure_boot_and_setup_files_on_cd(render_windows):
    rendered = render_windows(2)
    builder = rendered.packer["builders"][0]
    assert builder["type"] == "hyperv-iso" and builder["generation"] == 2
    assert builder["enable_secure_boot"] is True
    assert builder["secure_boot_template"] == "MicrosoftWindows"
    assert "floppy_files" not in builder  # Gen2 has no floppy controller
    names = [Path(p).name for p in builder["cd_files"]]
    # The setup files, then the box's verified downloads that build-* stages (k4w/media/build_media.py).
    assert names == ["Autounattend.xml", "k4w-bootstrap.ps1", "common.ps1", "winrm-scope.ps1", "winrm-cert.ps1", "*"]
    assert builder["cd_files"][-1] == f"{rendered.out}/http/{BOX}/components/*"


def test_gen1_has_no_secure_boot_and_uses_a_floppy(render_windows):
    rendered = render_windows(1)
    builder = rendered.packer["builders"][0]
    assert builder["generation"] == 1
    assert not {"enable_secure_boot", "secure_boot_template"} & set(builder)
    assert [Path(p).name for p in builder["floppy_files"]] == ["Autounattend.xml", "k4w-bootstrap.ps1", "common.ps1", "winrm-scope.ps1",
                                                             "winrm-cert.ps1"]
    # The downloads are too big for a floppy: Gen1 gets a CD for them alone.
    assert builder["cd_files"] == [f"{rendered.out}/http/{BOX}/components/*"]


def test_an_unknown_generation_stops_the_render(render_windows):
    with pytest.raises(K4wError, match="build.generation must be 1 or 2, not 3"):
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
    assert builder["winrm_password"] == "${var.admin_password}"
    assert (builder["winrm_use_ssl"], builder["winrm_insecure"], builder["winrm_use_ntlm"], builder["winrm_port"]) == (True, True, True, 5986)


def test_the_box_post_processor_writes_a_partial_box_with_the_windows_vagrantfile(render_windows):
    rendered = render_windows(2)
    [post] = rendered.packer["post-processors"]
    assert post["type"] == "vagrant"
    assert post["output"] == f"{rendered.out}/boxes/.partial/{BOX}-{{{{.Provider}}}}.box"
    # Shipped in the rendered folder beside the template (k4w.render.shipped_sources).
    assert post["vagrantfile_template"] == str(rendered.out / "packer" / "vagrant" / "box" / "windows.Vagrantfile")
    assert rendered.files["packer/vagrant/box/windows.Vagrantfile"] == (ROOT / "vagrant" / "box" / "windows.Vagrantfile").read_text()


def test_iso_checksum_is_the_known_sha256_and_never_none(render_windows, profile_dir):
    known = iso.iso_sha256(profiles.load(BOX))  # iso/catalogue.yml may already list the user's ISO
    # Unknown: a value no ISO has, so a `packer build` of this render by hand fails its check.
    assert render_windows(2).packer["builders"][0]["iso_checksum"] == f"sha256:{known or '0' * 64}"
    digest = "ab" * 32
    profile_dir(lambda data: data["iso"].__setitem__("sha256", digest))
    assert render_windows(2).packer["builders"][0]["iso_checksum"] == f"sha256:{digest}"


def test_no_secret_in_the_rendered_template(render_windows, generation):
    rendered = render_windows(generation)
    text = rendered.packer_text
    assert SECRET not in text
    assert rendered.packer["variables"]["admin_password"] == '${env("K4W_ADMIN_PASSWORD")}'
    assert "admin_password" in rendered.packer["sensitive-variables"]
    # ...while the answer file does carry it (encoded), which is how Setup gets it.
    assert SECRET not in rendered.unattend


def test_without_a_proxy_no_proxy_value_reaches_the_guest(render_windows):
    rendered = render_windows(2)
    env = rendered.env("03-docker.ps1")
    assert env["K4W_PROXY_ENABLED"] == "0" and env["K4W_PROXY_ENV"] == ""
    assert not {name for name in env if name.startswith(("K4W_HTTP_PROXY", "K4W_HTTPS_PROXY", "K4W_NO_PROXY"))}
    # The password and the ISO to install from (iso_path: --iso), no proxy variable.
    assert set(rendered.packer["variables"]) == {"admin_password", "iso_path"}


def _resolved(rendered, value: str) -> str:
    """An environment value as the guest sees it: the ${var.x} references filled in."""
    return packer_hcl.resolve(value, rendered.variables)


def test_proxy_values_reach_every_script_and_are_masked(render_windows):
    rendered = render_windows(2, http=HTTP_PROXY, https=HTTPS_PROXY)
    proxy = rendered.proxy
    variables = rendered.variables
    assert variables["http_proxy"] == HTTP_PROXY and variables["https_proxy"] == HTTPS_PROXY
    # ...from the environment the build runner gives Packer: the template file holds no credential.
    assert PROXY_PASSWORD not in rendered.packer_text
    for prov in rendered.packer["provisioners"]:
        if prov["type"] != "powershell":
            continue
        env = dict(item.split("=", 1) for item in prov["environment_vars"])
        assert env["K4W_PROXY_ENABLED"] == "1"
        # Machine and Docker service environment: one name per variable (Windows ignores case).
        assert _resolved(rendered, env["K4W_PROXY_ENV"]).split(" ") == [
            f"{name}={value}" for name, value in proxy.env.items() if name.isupper()]
        assert env["K4W_NO_PROXY"] == proxy.no_proxy_str
        # WinHTTP/WinINet and Invoke-WebRequest: host:port and the credentials, split by k4w.derive.values.
        assert env["K4W_HTTP_PROXY_HOSTPORT"] == "proxy.corp.example:3128"
        assert env["K4W_HTTPS_PROXY_HOSTPORT"] == "secure-proxy.corp.example:8443"
        assert _resolved(rendered, env["K4W_HTTP_PROXY_USER"]) == PROXY_USER
        assert _resolved(rendered, env["K4W_HTTP_PROXY_PASSWORD"]) == PROXY_PASSWORD
        assert "K4W_HTTPS_PROXY_USER" not in env  # that proxy takes no credentials
    # Every value that holds a credential is a sensitive variable, never an environment line.
    # (iso_path names a file on the build host, no credential.)
    assert set(variables) - {"admin_password", "iso_path"} == set(rendered.packer["sensitive-variables"]) - {"admin_password"}
    assert all(PROXY_PASSWORD not in item for prov in rendered.packer["provisioners"]
               for item in prov.get("environment_vars", []))
    assert PROXY_PASSWORD not in json.dumps(rendered.packer)


def test_https_proxy_is_never_taken_from_http(render_windows):
    rendered = render_windows(2, http=HTTP_PROXY)
    env = rendered.env("01-proxy.ps1")
    assert "K4W_HTTP_PROXY_HOSTPORT" in env and "K4W_HTTPS_PROXY_HOSTPORT" not in env
    assert "HTTPS_PROXY=" not in env["K4W_PROXY_ENV"]
    assert "https_proxy" not in rendered.packer["variables"]


def test_the_step_list_is_the_profiles(render_windows, profile_dir):
    """The profile's provision: list decides the provisioners; the template adds only the upload of common.ps1."""
    profile_dir(lambda data: data.__setitem__("provision", ["00-preflight.ps1", "restart", "12-cleanup.ps1"]))
    provisioners = render_windows(2).packer["provisioners"]
    assert [(p["type"], Path(p.get("script") or p.get("source") or "-").name) for p in provisioners] == [
        ("file", "common.ps1"), ("powershell", "00-preflight.ps1"), ("windows-restart", "-"), ("powershell", "12-cleanup.ps1")]


def test_an_unknown_step_marker_stops_the_render(render_windows, profile_dir):
    profile_dir(lambda data: data.__setitem__("provision", ["00-preflight.ps1", "reboot"]))
    with pytest.raises(K4wError, match="provision entry reboot is neither a .ps1 script of guest/windows/bake/ nor one of restart, upload, fetch-release"):
        render_windows(2)


def test_values_that_may_be_unset_are_read_as_optional(render_windows):
    """Windows deletes an environment variable set to "", so a value the profile or the config may
    leave out arrives *unset*: every K4W_* name that is not set for every build of a box must be read
    by that box's scripts with Get-K4wEnv -Optional, directly or through the component table of
    common.ps1."""
    common = (GUEST / "common.ps1").read_text()
    fields: dict[str, set[str]] = {}
    for field, name in re.findall(r"(\w+) = '(K4W_[A-Z0-9_]+)'", common[common.index("$script:K4wComponents"):]):
        fields.setdefault(field, set()).add(name)
    assert {"File", "Sha256", "Sha512"} <= set(fields)
    checked = 0
    for box in WINDOWS_BOXES:
        builds = [render_windows(2, box=box, **proxy).env("00-preflight.ps1") for proxy in ({}, {"http": HTTP_PROXY, "https": HTTPS_PROXY})]
        always = {name for name in builds[0] if all(env.get(name) for env in builds)}
        steps = [GUEST / "bake" / s for s in render_windows(2, box=box).profile["provision"] if s.endswith(".ps1")]
        for script in [*(GUEST / "setup").glob("*.ps1"), GUEST / "common.ps1", *steps]:
            for line in script.read_text().splitlines():
                call = re.search(r"Get-K4wEnv\s+-Name\s+(\S+)", line)
                if not call:
                    continue
                literal = re.fullmatch(r"'(K4W_[A-Z0-9_]+)'", call.group(1))
                field = re.search(r"\.(\w+)\)?$", call.group(1))
                names = {literal.group(1)} if literal else fields.get(field.group(1), set()) if field else set()
                if names - always:
                    checked += 1
                    assert "-Optional" in line, f"{box} {script.name}: {line.strip()}"
    assert checked >= 4, "the checksum and proxy reads were not found: this test is stale"
