"""templates/http/ubuntu/preseed/preseed.cfg.j2: what debian-installer is told, checked by debconf itself."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.helpers import system_tool

from .conftest import HTTP_PROXY, HTTPS_PROXY, make_root, proxy_step_env, run_step, snapshot

APT_PROXY_FILE = "/etc/apt/apt.conf.d/90k4w-proxy"


def answers(preseed: str) -> dict[str, str]:
    """{question: value} with backslash-continued lines joined, as debconf-set-selections reads them."""
    joined = re.sub(r"\\\n", "", preseed)
    out = {}
    for line in joined.splitlines():
        if line.strip() and not line.startswith("#"):
            owner, question, kind, *value = line.split(None, 3)
            out[question] = value[0].strip() if value else ""
    return out


def late_commands(preseed: str) -> list[str]:
    return [c.strip() for c in answers(preseed)["preseed/late_command"].split(" && ")]


@pytest.mark.parametrize("http,https", [(None, None), (HTTP_PROXY, None), (None, HTTPS_PROXY), (HTTP_PROXY, HTTPS_PROXY)])
def test_debconf_accepts_the_preseed(ubuntu, tmp_path, http, https):
    tool = system_tool("debconf-set-selections")
    seed = tmp_path / "preseed.cfg"
    seed.write_text(ubuntu(http, https)[1])
    res = subprocess.run([tool, "--checkonly", str(seed)], capture_output=True, text=True, check=False)
    assert res.returncode == 0 and not (res.stdout + res.stderr).strip(), res.stdout + res.stderr


def test_partitions_are_efi_and_root_without_swap(ubuntu):
    a = answers(ubuntu()[1])
    recipe = a["partman-auto/expert_recipe"]
    assert "swap" not in recipe
    assert recipe.count(" . ") + recipe.endswith(".") == 2  # exactly two partitions
    assert "method{ efi }" in recipe and "mountpoint{ / }" in recipe
    assert a["partman-auto/choose_recipe"] == recipe.split()[0]
    assert a["partman-basicfilesystems/no_swap"] == "false"
    assert a["partman-partitioning/choose_label"] == "gpt"


def test_hyperv_tools_and_ssh_are_installed_by_the_installer(ubuntu):
    packages = answers(ubuntu()[1])["pkgsel/include"].split()
    for package in ("openssh-server", "linux-virtual-lts-xenial", "linux-tools-virtual-lts-xenial",
                    "linux-cloud-tools-virtual-lts-xenial"):
        assert package in packages


def test_locale_keyboard_timezone_and_mirror(ubuntu):
    a = answers(ubuntu()[1])
    assert a["debian-installer/locale"] == "en_US.UTF-8"
    assert a["keyboard-configuration/layoutcode"] == "us"
    assert a["time/zone"] == "UTC"
    assert a["mirror/http/hostname"] == "archive.ubuntu.com"
    assert a["mirror/http/directory"] == "/ubuntu"


def test_vagrant_user_with_checked_passwordless_sudo(ubuntu):
    seed = ubuntu()[1]
    a = answers(seed)
    assert (a["passwd/username"], a["passwd/user-password"], a["passwd/user-password-again"]) == ("vagrant",) * 3
    commands = late_commands(seed)
    new = next(c for c in commands if c.startswith("echo 'vagrant ALL=(ALL) NOPASSWD: ALL' >")).split("> ")[1]
    assert "." in new.rsplit("/", 1)[1]  # sudo's includedir skips names with a dot until it is checked
    order = [commands.index(c) for c in (f"chmod 0440 {new}", f"in-target visudo -cf {new.removeprefix('/target')}",
                                         f"mv {new} /target/etc/sudoers.d/vagrant")]
    assert order == sorted(order)


def test_efi_fallback_loader_and_no_popularity_contest(ubuntu):
    # What the ESP commands do is run for real in test_ubuntu_installed_boot.py.
    seed = ubuntu()[1]
    commands = late_commands(seed)
    assert "cp /target/boot/efi/EFI/ubuntu/shimx64.efi /target/boot/efi/EFI/BOOT/bootx64.efi" in commands
    assert not [c for c in commands if c.startswith("cp ") and "*" in c]  # named files only, never a glob
    assert answers(seed)["popularity-contest/participate"] == "false"


def test_no_proxy_anywhere_without_a_proxy(ubuntu):
    seed = ubuntu()[1]
    assert answers(seed)["mirror/http/proxy"] == ""
    assert "Proxy" not in answers(seed)["preseed/late_command"]


def test_http_proxy_for_the_installer_mirror_only_never_for_the_installed_system(ubuntu):
    seed = ubuntu(http=HTTP_PROXY, https=HTTPS_PROXY)[1]
    # Without its credentials: Packer's HTTP server serves this file (the boot line brings them).
    assert answers(seed)["mirror/http/proxy"] == "http://proxy.corp.example:3128/"
    assert "k4w_installer_proxy=" in answers(seed)["preseed/early_command"]
    # The box must not keep the build's proxy: the late_command writes no proxy file.
    assert "Proxy" not in answers(seed)["preseed/late_command"]
    assert APT_PROXY_FILE not in answers(seed)["preseed/late_command"]


def test_https_proxy_is_never_taken_from_http(ubuntu):
    seed = ubuntu(https=HTTPS_PROXY)[1]
    assert answers(seed)["mirror/http/proxy"] == ""  # the mirror is http: only proxy.http applies


def test_step_01_drops_the_proxy_line_the_installer_leaves_in_apt_conf(tmp_path):
    # debian-installer's apt-setup writes mirror/http/proxy, credentials included, to /etc/apt/apt.conf.
    root = make_root(tmp_path)
    (root / "etc" / "apt").mkdir()
    (root / "etc" / "apt" / "apt.conf").write_text(f'Acquire::http::Proxy "{HTTP_PROXY}";\nAPT::Other "1";\n')
    res = run_step("01-proxy.sh", root, **proxy_step_env(HTTP_PROXY, HTTPS_PROXY))
    assert res.returncode == 0, res.stderr
    assert (root / "etc" / "apt" / "apt.conf").read_text() == 'APT::Other "1";\n'


def test_qemu_boxes_get_no_installer_files(profile_dir, tmp_path):
    """A box that boots an installed image (no installer section) runs no installer, so it gets
    none of the installer kinds' templates (docs/internals.md, the render contract)."""
    from k4w import render

    from .conftest import qemu_cluster

    files = render.render_files(qemu_cluster(), tmp_path / "out")
    assert "packer/debian-12-ci.pkr.hcl" in files
    assert not [name for name in files if name.startswith("http/debian-12-ci/")]
