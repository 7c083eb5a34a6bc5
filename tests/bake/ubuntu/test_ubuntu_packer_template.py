"""templates/packer/ubuntu.pkr.hcl.j2 as a user's build sees it: the VM, the boot line, the provisioning."""

from __future__ import annotations

import json

import socket
import subprocess

import pytest
import yaml

from k4w.infra import packer_hcl
from k4w import render
from k4w.media.build_media import media_name
from k4w.derive.step_env import DOCUMENTATION_KEYS, HOST_KEYS, PROFILE_VARIABLES
from k4w.infra.errors import K4wError
from tests.helpers import system_tool

from .conftest import BOX, HTTP_PROXY, HTTPS_PROXY, PROFILE, ROOT, cluster, qemu_cluster

PROFILE_DATA = yaml.safe_load(PROFILE.read_text())


def builder(template: dict) -> dict:
    (only,) = template["builders"]
    return only


def boot_line(template: dict) -> str:
    """The kernel line typed at the GRUB prompt."""
    (line,) = [c for c in builder(template)["boot_command"] if c.startswith("linux ")]
    return line


def env_of(provisioner: dict) -> dict[str, str]:
    return dict(item.split("=", 1) for item in provisioner["environment_vars"])


def shell_steps(template: dict) -> list[dict]:
    return [p for p in template["provisioners"] if p["type"] == "shell"]


# ------------------------------------------------------------------ the Hyper-V VM


def test_hyperv_gen2_vm_from_the_profile(ubuntu, tmp_path):
    template, _ = ubuntu()
    vm = builder(template)
    assert vm["type"] == "hyperv-iso"
    assert vm["generation"] == 2
    assert vm["enable_secure_boot"] is False
    assert vm["enable_dynamic_memory"] is False
    assert vm["switch_name"] == "Default Switch"
    assert (vm["cpus"], vm["memory"], vm["disk_size"]) == (2, 2048, 40 * 1024)
    out = tmp_path / "out"
    assert vm["http_directory"] == str(out / "http" / BOX)
    assert vm["output_directory"] == f"{out}/packer-vm/{BOX}"


def test_iso_local_copy_first_then_the_published_url_with_its_checksum(ubuntu):
    vm = builder(ubuntu()[0])
    assert vm["iso_urls"] == [str(ROOT / "iso" / PROFILE_DATA["iso"]["name"]), PROFILE_DATA["iso"]["url"],
                              PROFILE_DATA["iso"]["superseded_url"]]
    assert vm["iso_checksum"] == "sha256:" + PROFILE_DATA["iso"]["sha256"]


def test_boot_goes_through_the_grub_command_line(ubuntu):
    commands = builder(ubuntu()[0])["boot_command"]
    assert commands[0] == "c<wait>"
    assert commands[1].startswith("linux /install/vmlinuz ") and commands[1].endswith("<enter>")
    assert commands[2:] == ["initrd /install/initrd.gz<enter>", "boot<enter>"]


def test_boot_line_without_proxy(ubuntu):
    words = boot_line(ubuntu()[0]).removesuffix("<enter>").split()
    for piece in (
        "auto=true",
        "priority=critical",
        "preseed/url=http://{{",  # split() cuts the Go template; the full URL is checked below
        f"hostname={BOX}",
        "locale=en_US.UTF-8",
        "keyboard-configuration/layoutcode=us",
        "console-setup/ask_detect=false",
    ):
        assert piece in words
    line = boot_line(ubuntu()[0])
    assert "preseed/url=http://{{ .HTTPIP }}:{{ .HTTPPort }}/preseed.cfg " in line
    assert "mirror/http/proxy" not in line
    assert "no_proxy" not in line


@pytest.mark.parametrize("http,https", [(HTTP_PROXY, None), (None, HTTPS_PROXY), (HTTP_PROXY, HTTPS_PROXY)])
def test_the_boot_line_never_carries_a_proxy_setting(ubuntu, http, https):
    # The installer's busybox wget fetches preseed.cfg and ignores no_proxy (see the busybox
    # test below): a proxy here would route that fetch away from Packer's HTTP server. Only a
    # proxy with credentials adds k4w_installer_proxy, which no fetch reads (the preseed's
    # early_command does), so that preseed.cfg, which Packer serves, holds none.
    template, seed = ubuntu(http=http, https=https)
    line = boot_line(template)
    words = [w.strip("'") for w in line.removesuffix("<enter>").split()]
    assert not [w for w in words if w.lower().startswith(("mirror/http/proxy", "http_proxy", "https_proxy"))]
    assert [w.split("=")[0] for w in words if "proxy" in w.lower()] == (["k4w_installer_proxy"] if http else [])
    if http:
        assert "d-i mirror/http/proxy string" in seed  # the preseed carries it instead


def test_boot_line_stays_short(ubuntu):
    # GRUB takes long lines, but the kernel command line is capped (2048 on x86) and the
    # installer parses every word: everything not needed before preseed.cfg lives there.
    assert len(boot_line(ubuntu(http=HTTP_PROXY)[0])) < 512


# ------------------------------------------------------------------ provisioning


def test_provisioners_follow_the_profiles_order_after_the_library_upload(ubuntu, tmp_path):
    template, _ = ubuntu()
    first = template["provisioners"][0]
    # The scripts ship in the rendered folder (OUT/packer/guest/), copies of the checkout's guest/.
    shipped = tmp_path / "out" / "packer"
    assert first == {
        "type": "file",
        "source": str(shipped / "guest" / "ubuntu" / "lib.sh"),
        "destination": env_of(shell_steps(template)[0])["K4W_LIB"],
    }
    scripts = [p["script"] for p in shell_steps(template)]
    assert scripts == [str(shipped / "guest" / "ubuntu" / "bake" / s) for s in PROFILE_DATA["provision"]]
    assert len(template["provisioners"]) == len(PROFILE_DATA["provision"]) + 1


def test_every_step_in_the_profile_exists():
    for script in PROFILE_DATA["provision"]:
        assert (ROOT / "guest" / "ubuntu" / "bake" / script).is_file(), script


def test_steps_run_as_root_with_their_environment_from_a_file_not_the_command_line(ubuntu):
    # sudo logs its command line to the journal: {{ .Vars }} there would log the proxy's password.
    for step in shell_steps(ubuntu()[0]):
        command = step["execute_command"]
        assert step["use_env_var_file"] is True
        assert "sudo" in command and ". {{ .EnvVarFile }}" in command and "{{ .Path }}" in command
        assert "{{ .Vars }}" not in command


def test_every_component_value_reaches_the_guest_under_its_table_name(ubuntu):
    env = env_of(shell_steps(ubuntu()[0])[0])
    by_key = {spec.key: name for name, spec in PROFILE_VARIABLES.items() if "ubuntu" in spec.families}
    for component, spec in PROFILE_DATA["components"].items():
        for key, value in spec.items():
            if key in DOCUMENTATION_KEYS + HOST_KEYS:  # for people, the validators or the host's fetch
                assert not any(v == str(value) for v in env.values()), (component, key)
                continue
            assert env[by_key[f"components.{component}.{key}"]] == str(value), (component, key)
        if spec.get("url"):
            # The guest gets the file's name on the build media instead (k4w/media/build_media.py).
            assert env[f"K4W_{component.upper()}_FILE"] == media_name(component, spec["url"]), component
    assert env["K4W_KUBE_VERSION"] == PROFILE_DATA["kubernetes"]["version"]
    assert env["K4W_KUBE_IMAGE_REPOSITORY"] == PROFILE_DATA["kubernetes"]["image_repository"]
    assert env["K4W_KUBE_PREPULL_IMAGES"] == "1"  # a YAML boolean reaches the guest as 1/0
    assert env["K4W_BOX"] == BOX


def test_build_record_is_exactly_the_profiles_components(ubuntu):
    env = env_of(shell_steps(ubuntu()[0])[0])
    assert json.loads(env["K4W_RELEASE_JSON"]) == {
        "box": BOX,
        "components": {name: str(c["version"]) for name, c in PROFILE_DATA["components"].items()},
    }


def test_all_steps_share_one_environment(ubuntu):
    envs = [step["environment_vars"] for step in shell_steps(ubuntu()[0])]
    assert all(e == envs[0] for e in envs)


STANDARD_PROXY_NAMES = {"HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy"}


def _pairs(env: dict[str, str]) -> dict[str, str]:
    """K4W_PROXY_ENV as the guest splits it (blank-separated NAME=value)."""
    return dict(pair.split("=", 1) for pair in env["K4W_PROXY_ENV"].split())


def test_no_proxy_variables_without_a_proxy(ubuntu):
    env = env_of(shell_steps(ubuntu()[0])[0])
    assert env["K4W_PROXY_ENV"] == env["K4W_APT_PROXY_CONF"] == ""
    assert not STANDARD_PROXY_NAMES & env.keys()


def test_http_proxy_only_is_never_copied_to_https(ubuntu):
    env = env_of(shell_steps(ubuntu(http=HTTP_PROXY)[0])[0])
    assert _pairs(env) == {"HTTP_PROXY": HTTP_PROXY, "http_proxy": HTTP_PROXY, "NO_PROXY": env["NO_PROXY"], "no_proxy": env["NO_PROXY"]}
    assert env["HTTP_PROXY"] == env["http_proxy"] == HTTP_PROXY
    assert "HTTPS_PROXY" not in env and "https_proxy" not in env
    assert "Acquire::https" not in env["K4W_APT_PROXY_CONF"]


def test_the_guest_gets_the_derived_proxy_values_verbatim(ubuntu):
    env = env_of(shell_steps(ubuntu(http=HTTP_PROXY, https=HTTPS_PROXY)[0])[0])
    proxy = cluster(HTTP_PROXY, HTTPS_PROXY).proxy
    assert _pairs(env) == proxy.env == {name: env[name] for name in STANDARD_PROXY_NAMES}
    assert env["K4W_APT_PROXY_CONF"] == proxy.apt_conf  # the preseed writes this same text
    assert env["K4W_PROXY_FILE_MODE"] == "0600"  # the URL carries a password


def test_proxy_exceptions_cover_the_cluster(ubuntu):
    env = env_of(shell_steps(ubuntu(http=HTTP_PROXY, https=HTTPS_PROXY)[0])[0])
    exceptions = env["NO_PROXY"].split(",")
    for entry in ("10.244.0.0/16", "10.96.0.0/12", "192.168.250.0/24", "192.168.250.10", "master", ".svc"):
        assert entry in exceptions
    assert _pairs(env)["NO_PROXY"] == _pairs(env)["no_proxy"] == env["no_proxy"] == env["NO_PROXY"]


def test_box_goes_to_the_partial_folder_with_the_family_vagrantfile(ubuntu, tmp_path):
    (post,) = ubuntu()[0]["post-processors"]
    assert post["type"] == "vagrant"
    assert post["output"] == f"{tmp_path / 'out' / 'boxes'}/.partial/{BOX}-{{{{.Provider}}}}.box"
    assert post["vagrantfile_template"] == str(tmp_path / "out" / "packer" / "vagrant" / "box" / "ubuntu.Vagrantfile")


# ------------------------------------------------------------------ the CI (qemu) branch


def test_qemu_branch_boots_the_image_and_shares_the_provisioning(profile_dir, tmp_path):
    files = render.render_files(qemu_cluster(), tmp_path / "out")
    qemu = packer_hcl.parse(files["packer/debian-12-ci.pkr.hcl"])
    hyperv = packer_hcl.parse(render.render_files(cluster(HTTPS_PROXY, HTTPS_PROXY), tmp_path / "out2")[f"packer/{BOX}.pkr.hcl"])
    vm = builder(qemu)
    assert vm["type"] == "qemu" and vm["disk_image"] is True and vm["accelerator"] == "tcg"
    # The image Packer boots: the profile's, unless the build names another (--iso, as invoke e2e does).
    assert packer_hcl.resolve(vm["iso_url"], {"iso_path": ""}) == "/srv/ci/debian-12.raw" and "boot_command" not in vm
    assert packer_hcl.resolve(vm["iso_url"], {"iso_path": "/elsewhere/base.qcow2"}) == "/elsewhere/base.qcow2"
    assert vm["qemuargs"] == [["-kernel", "/srv/ci/vmlinuz"], ["-initrd", "/srv/ci/initrd.img"],
                              ["-append", "root=/dev/vda rw console=ttyS0"]]
    assert [p.get("script") for p in qemu["provisioners"]] == [
        p.get("script") for p in hyperv["provisioners"]
    ]
    assert qemu["post-processors"][0]["vagrantfile_template"] == hyperv["post-processors"][0]["vagrantfile_template"]
    env = env_of(shell_steps(qemu)[0])
    assert env["K4W_SKIP_KUBERNETES"] == "1"
    assert json.loads(env["K4W_RELEASE_JSON"]) == {"box": "debian-12-ci", "components": {"docker": "20.10.24"}}


# ------------------------------------------------------------------ refusals


def _render_with_profile(profile_dir, tmp_path, change):
    data = yaml.safe_load((profile_dir / f"{BOX}.yml").read_text())
    change(data)
    (profile_dir / f"{BOX}.yml").write_text(yaml.safe_dump(data))
    return render.render_files(cluster(), tmp_path / "out")


def test_generation_1_is_refused_by_name(profile_dir, tmp_path):
    with pytest.raises(K4wError, match="only Hyper-V generation 2 is supported"):
        _render_with_profile(profile_dir, tmp_path, lambda d: d["build"].update(generation=1))


def test_unknown_builder_is_refused_by_name(profile_dir, tmp_path):
    with pytest.raises(K4wError, match="build.builder must be hyperv-iso or qemu"):
        _render_with_profile(profile_dir, tmp_path, lambda d: d["build"].update(builder="virtualbox-iso"))


def test_missing_iso_checksum_is_refused_by_name(profile_dir, tmp_path, monkeypatch):
    from k4w.media import iso

    monkeypatch.setattr(iso, "catalogue_path", lambda: tmp_path / "empty-catalogue.yml")
    with pytest.raises(K4wError, match="the ISO sha256 is unknown"):
        _render_with_profile(profile_dir, tmp_path, lambda d: d["iso"].pop("sha256"))


def test_proxy_credentials_reach_the_guest_only_through_sensitive_variables(render_box):
    """Packer masks sensitive variables in its output and logs; the raw URL is in one place only."""
    from tests.bake.ubuntu.conftest import cluster

    from k4w.infra import packer_cli
    from k4w.derive.step_env import step_env

    resolved = cluster(HTTP_PROXY, None)
    raw = render_box(resolved)[f"packer/{BOX}.pkr.hcl"]
    template = packer_hcl.parse(raw)
    assert template["sensitive-variables"] == ["http_proxy", "https_proxy"]
    # Not in the file: from the environment the build runner gives Packer.
    assert HTTP_PROXY not in raw
    environ = step_env(resolved.profile(BOX), resolved).secret_environment
    assert packer_cli.variable_values(template, environ)["http_proxy"] == HTTP_PROXY
    assert all(HTTP_PROXY not in item for step in shell_steps(template) for item in step["environment_vars"])


def test_a_proxy_without_credentials_is_not_masked(render_box):
    from tests.bake.ubuntu.conftest import cluster

    template = packer_hcl.parse(render_box(cluster("http://proxy.corp.example:3128", None))[f"packer/{BOX}.pkr.hcl"])
    assert template["variables"] and template["sensitive-variables"] == []


def test_busybox_wget_sends_even_a_no_proxy_host_to_the_proxy():
    """Why the boot line carries no proxy: debian-installer fetches preseed.cfg with busybox
    wget, and busybox wget ignores no_proxy. Run Debian's busybox: with http_proxy and no_proxy
    both set, the fetch of a no_proxy host still goes to the proxy."""
    busybox = system_tool("busybox")
    seen: list[bytes] = []
    with socket.socket() as proxy:
        proxy.bind(("127.0.0.1", 0))
        proxy.listen(1)
        proxy.settimeout(10)
        port = proxy.getsockname()[1]
        env = {"PATH": "/usr/bin:/bin", "http_proxy": f"http://127.0.0.1:{port}", "no_proxy": "127.0.0.2"}
        wget = subprocess.Popen([busybox, "wget", "-O", "/dev/null", "http://127.0.0.2:9/preseed.cfg"],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            conn, _ = proxy.accept()
            with conn:
                seen.append(conn.recv(1024))
                conn.sendall(b"HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n")
        finally:
            wget.wait(timeout=10)
    assert seen and b"GET http://127.0.0.2:9/preseed.cfg" in seen[0]
