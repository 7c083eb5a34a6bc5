"""boxes/ubuntu-2404.yml through the real `invoke render` / `invoke validate`: the subiquity
autoinstall seed (templates/http/ubuntu/autoinstall/), its delivery on a cidata CD, and the checks by
cloud-init and subiquity's own schema."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest
import yaml

from k4w.infra import packer_hcl
from k4w.infra.sources import REPO_ROOT as ROOT
from k4w.validate import autoinstall_rules
from tests.helpers import config_dict, invoke, modern_config, system_tool, tree_digest, write_config

BOX = "ubuntu-2404"
PROFILE = ROOT / "boxes" / f"{BOX}.yml"
PROXY = "http://bob:s3cr%40t@proxy.corp.example:3128"
HTTPS_PROXY = "http://secure-proxy.corp.example:3129"


def mixed_config(**overrides) -> dict:
    """The containerd era's cluster (ubuntu-2404 master and Linux worker, windows-2022 worker) behind
    the proxy. (Its name is older than the version-skew rule: one cluster held both installer kinds,
    a 1604 master beside a 2404 worker; the preseed box is rendered apart now, seed_rendered.)"""
    return modern_config(**{"proxy.http": PROXY, "proxy.https": HTTPS_PROXY, **overrides})


def _render(folder: Path, data: dict) -> Path:
    cfg = write_config(folder / "cluster.yml", data)
    out = folder / "out"
    res = invoke("render", "--config", str(cfg), "--out", str(out))
    assert res.returncode == 0, res.stdout + res.stderr
    return out


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    return _render(tmp_path_factory.mktemp("autoinstall"), mixed_config())


@pytest.fixture(scope="module")
def seed_rendered(tmp_path_factory):
    """The seed era's cluster (ubuntu-1604, the preseed installer) behind the same proxy."""
    return _render(tmp_path_factory.mktemp("preseed"), config_dict(**{"proxy.http": PROXY, "proxy.https": HTTPS_PROXY}))


def user_data(out) -> dict:
    return yaml.safe_load((out / "http" / BOX / "user-data").read_text())


def test_each_box_gets_only_the_files_of_its_installer_kind(rendered, seed_rendered):
    assert sorted(p.name for p in (rendered / "http" / BOX).iterdir()) == ["meta-data", "user-data"]
    assert sorted(p.name for p in (seed_rendered / "http" / "ubuntu-1604").iterdir()) == ["preseed.cfg"]
    for seed in (rendered / "http" / BOX).iterdir():
        assert seed.stat().st_mode & 0o777 == 0o600  # user-data holds the proxy's credentials


def test_the_seed_is_a_nocloud_autoinstall_with_the_proxy_in_its_proxy_key(rendered):
    text = (rendered / "http" / BOX / "user-data").read_text()
    assert text.splitlines()[0] == "#cloud-config"
    auto = user_data(rendered)["autoinstall"]
    assert auto["version"] == 1
    assert auto["proxy"] == PROXY  # proxy.http: the archive is plain http
    assert auto["refresh-installer"] == {"update": False}  # the installer whose schema is vendored
    assert auto["storage"]["swap"] == {"size": 0}
    profile = yaml.safe_load(PROFILE.read_text())
    assert auto["packages"] == profile["installer"]["packages"]
    assert {"linux-tools-virtual", "linux-cloud-tools-virtual"} <= set(auto["packages"])  # Hyper-V KVP: the guest IP
    assert auto["identity"]["username"] == "vagrant" and auto["identity"]["hostname"] == BOX
    meta = yaml.safe_load((rendered / "http" / BOX / "meta-data").read_text())
    assert meta == {"instance-id": f"k4w-build-{BOX}", "local-hostname": BOX}


def test_the_password_hash_is_vagrant(rendered):
    hashed = user_data(rendered)["autoinstall"]["identity"]["password"]
    _, algorithm, salt, _ = hashed.split("$")
    openssl = system_tool("openssl")
    again = subprocess.run([openssl, "passwd", "-6", "-salt", salt, "vagrant"], capture_output=True, text=True, check=True)
    assert algorithm == "6" and again.stdout.strip() == hashed


def test_without_an_http_proxy_the_https_one_is_the_installers(tmp_path):
    cfg = write_config(tmp_path / "cluster.yml", mixed_config(**{"proxy.http": None}))
    res = invoke("render", "--config", str(cfg), "--out", str(tmp_path / "out"))
    assert res.returncode == 0, res.stderr
    assert user_data(tmp_path / "out")["autoinstall"]["proxy"] == HTTPS_PROXY


def test_without_a_proxy_there_is_no_proxy_key(tmp_path):
    cfg = write_config(tmp_path / "cluster.yml", mixed_config(**{"proxy.http": None, "proxy.https": None}))
    res = invoke("render", "--config", str(cfg), "--out", str(tmp_path / "out"))
    assert res.returncode == 0, res.stderr
    assert "proxy" not in user_data(tmp_path / "out")["autoinstall"]


def test_the_seed_goes_on_a_cidata_cd_and_the_boot_line_has_no_proxy(rendered):
    template = packer_hcl.load(rendered / "packer" / f"{BOX}.pkr.hcl")
    builder = template["builders"][0]
    seed = rendered / "http" / BOX
    assert builder["cd_files"] == [str(seed / "user-data"), str(seed / "meta-data")]
    assert builder["cd_label"] == "cidata"  # NoCloud finds its seed by this label
    # Packer's HTTP server is for the steps' downloads only: the installer needs nothing from it, and
    # the seed, which holds the proxy's credentials, is not beneath it (the firewall rule admits the LAN).
    assert builder["http_directory"] == str(seed / "components")
    assert not (seed / "user-data").resolve().is_relative_to(Path(builder["http_directory"]).resolve())
    typed = " ".join(builder["boot_command"])
    assert "linux /casper/vmlinuz" in typed and " autoinstall<enter>" in typed and "initrd /casper/initrd" in typed
    assert "proxy" not in typed and "bob" not in typed and "ds=" not in typed
    assert builder["boot_order"] == ["SCSI:0:0"]  # the installed disk boots, never the ISO again


def test_the_preseed_box_keeps_its_boot_line_and_http_server(seed_rendered):
    builder = packer_hcl.load(seed_rendered / "packer" / "ubuntu-1604.pkr.hcl")["builders"][0]
    assert builder["http_directory"] == str(seed_rendered / "http" / "ubuntu-1604")
    assert "cd_files" not in builder
    assert any("preseed/url=http://{{ .HTTPIP }}:{{ .HTTPPort }}/preseed.cfg" in key for key in builder["boot_command"])


def test_validate_runs_cloud_init_and_the_autoinstall_schema_on_the_seed(tmp_path):
    cfg = write_config(tmp_path / "cluster.yml", mixed_config())
    res = invoke("validate", "--config", str(cfg), "--out", str(tmp_path / "out"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "cloud-config (user-data): 1 checked by cloud-init schema" in res.stdout
    assert "autoinstall (user-data): 1 checked by subiquity's autoinstall-schema.json + jsonschema" in res.stdout
    dry = invoke("validate", "--config", str(cfg), "--out", str(tmp_path / "dry"), "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert f"schema -c {tmp_path / 'dry' / 'http' / BOX / 'user-data'}" in dry.stdout
    assert "canonical/subiquity autoinstall-schema.json at 24.04.4" in dry.stdout


def _broken_profile(tmp_path, edit) -> dict:
    """A copy of boxes/ as K4W_BOX_DIRS, with ubuntu-2404 edited; returns the invoke env."""
    folder = tmp_path / "boxes"
    folder.mkdir()
    for real in (ROOT / "boxes").glob("*.yml"):
        (folder / real.name).write_text(real.read_text())
    data = yaml.safe_load(PROFILE.read_text())
    edit(data)
    (folder / PROFILE.name).write_text(yaml.safe_dump(data, sort_keys=False))
    return {"K4W_BOX_DIRS": str(folder)}


def test_a_seed_subiquity_would_refuse_fails_validate_naming_the_key(tmp_path):
    env = _broken_profile(tmp_path, lambda d: d["installer"]["packages"].append(5))  # a package must be a name
    cfg = write_config(tmp_path / "cluster.yml", mixed_config())
    res = invoke("validate", "--config", str(cfg), "--out", str(tmp_path / "out"), env=env)
    assert res.returncode == 1
    assert f"http/{BOX}/user-data: autoinstall.packages.6: 5 is not of type 'string'" in res.stdout + res.stderr
    assert "Traceback" not in res.stderr


def test_cloud_init_judges_the_file_itself(tmp_path):
    """The real cloud-init: a user-data whose cloud-config part has a wrong type fails, naming the key."""
    from k4w import validate
    from k4w.derive.cluster import Cluster
    from k4w.model import config
    from k4w.validate import cloud_config_rules

    out = tmp_path / "out"
    (out / "http" / BOX).mkdir(parents=True)
    seed = out / "http" / BOX / "user-data"
    seed.write_text("#cloud-config\nhostname: 5\nautoinstall:\n  version: 1\n")
    cluster = Cluster.resolve(config.parse(yaml.safe_dump(mixed_config())))
    res = cloud_config_rules.run(cluster, out)
    assert res.checked and res.problems and "hostname: 5 is not of type 'string'" in res.problems[0]
    seed.write_text("#cloud-config\nhostname: box\nautoinstall:\n  version: 1\n")
    assert cloud_config_rules.run(cluster, out).ok


@pytest.mark.parametrize("kind, message", [
    (None, "installer.kind is missing"),
    ("kickstart", "installer.kind 'kickstart' has no templates in templates/http/ubuntu/kickstart/ (known kinds: autoinstall, preseed)"),
    ("../windows", "installer.kind is '../windows', not a folder name"),
])
def test_an_installer_kind_without_templates_stops_the_render_and_writes_nothing(tmp_path, kind, message):
    def edit(data):
        if kind is None:
            del data["installer"]["kind"]
        else:
            data["installer"]["kind"] = kind

    env = _broken_profile(tmp_path, edit)
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    before = tree_digest(out)
    cfg = write_config(tmp_path / "cluster.yml", mixed_config())
    res = invoke("render", "--config", str(cfg), "--out", str(out), env=env)
    assert res.returncode == 1 and message in res.stdout + res.stderr, res.stdout + res.stderr
    assert "ubuntu-2404.yml" in res.stdout + res.stderr and "Traceback" not in res.stderr
    after = {name: digest for name, digest in tree_digest(out).items() if name != ".lock"}  # outlock's own file
    assert after == before


def test_the_vendored_schema_is_subiquitys_file_at_the_recorded_commit():
    origin = autoinstall_rules.source()
    assert origin["repository"] == "canonical/subiquity" and origin["path"] == "autoinstall-schema.json"
    assert len(origin["commit"]) == 40 and origin["tag"] == "24.04.4"
    assert hashlib.sha256(autoinstall_rules.SCHEMA.read_bytes()).hexdigest() == origin["sha256"]
    schema = autoinstall_rules.schema()
    assert schema["required"] == ["version"] and schema["properties"]["version"] == {"type": "integer", "minimum": 1, "maximum": 1}


@pytest.mark.parametrize("text, problem", [
    ("autoinstall:\n  version: 1\n", "the first line is not #cloud-config"),
    ("#cloud-config\nhostname: x\n", "no autoinstall: section"),
    ("#cloud-config\nautoinstall:\n  version: 2\n", "autoinstall.version: 2 is greater than the maximum of 1"),
    ("#cloud-config\nautoinstall:\n  version: 1\n  identity: {username: vagrant}\n",
     "autoinstall.identity: 'hostname' is a required property"),
])
def test_the_schema_check_names_what_subiquity_would_refuse(text, problem):
    assert any(p.startswith(problem) for p in autoinstall_rules.check_user_data(text)), autoinstall_rules.check_user_data(text)


def test_a_whole_section_is_never_quoted_back(tmp_path):
    """jsonschema quotes the failing value; a mapping may hold the proxy's credentials."""
    problems = autoinstall_rules.check_user_data(f"#cloud-config\nautoinstall:\n  version: 1\n  apt: [{{proxy: '{PROXY}'}}]\n")
    assert problems and not any("s3cr" in p for p in problems), problems


# ------------------------------------------------------------------ the kernel and its KVP daemon (issue 21.2)


def test_the_seed_pins_the_kernel_to_the_flavour_of_its_cloud_tools(rendered):
    auto = user_data(rendered)["autoinstall"]
    assert auto["kernel"] == {"package": "linux-image-virtual"}
    assert "linux-cloud-tools-virtual" in auto["packages"]
    assert autoinstall_rules.kernel_problems(auto) == []


@pytest.mark.parametrize("kernel, problem", [
    (None, "autoinstall.kernel: packages install linux-cloud-tools-virtual, but no kernel.package pins the kernel"),
    ("linux-generic-hwe-24.04", "autoinstall.kernel.package: linux-generic-hwe-24.04 (flavour generic-hwe-24.04) is not the flavour"),
])
def test_validate_refuses_a_kernel_whose_kvp_daemon_the_seed_does_not_install(tmp_path, kernel, problem):
    def edit(data):
        if kernel is None:
            del data["installer"]["kernel"]
        else:
            data["installer"]["kernel"] = kernel

    env = _broken_profile(tmp_path, edit)
    cfg = write_config(tmp_path / "cluster.yml", mixed_config())
    res = invoke("validate", "--config", str(cfg), "--out", str(tmp_path / "out"), env=env)
    assert res.returncode == 1
    assert f"http/{BOX}/user-data: {problem}" in res.stdout + res.stderr
