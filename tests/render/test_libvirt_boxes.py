"""The real box profiles on a libvirt host (host.provider libvirt): one qemu source that installs from the
ISO, with the same seed, answer file and keystrokes as the hyperv-iso source, and the virtio drivers loaded
in windowsPE from the virtio-win ISO."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from k4w.derive import control_plane
from k4w.infra import packer_hcl
from k4w.validate import packer_option_rules
from tests.helpers import MODERN_ENV, ROOT, invoke, modern_config, write_config

FIXTURE = ROOT / "tests" / "fixtures" / "libvirt" / "cluster.yml"


def _render(tmp_path: Path, config: Path | dict, name: str = "out", env=None):
    path = config if isinstance(config, Path) else write_config(tmp_path / f"{name}.yml", config)
    out = tmp_path / name
    result = invoke("render", "--config", str(path), "--out", str(out), env=env)
    return out, result


def _libvirt(tmp_path: Path, **libvirt) -> Path:
    data = yaml.safe_load(FIXTURE.read_text())
    data["libvirt"].update(libvirt)
    return write_config(tmp_path / "libvirt.yml", data)


def _builder(out: Path, box: str) -> tuple[dict, dict]:
    parsed = packer_hcl.load(out / "packer" / f"{box}.pkr.hcl")
    assert len(parsed["builders"]) == 1
    return parsed, parsed["builders"][0]


def test_a_libvirt_host_installs_both_os_boxes_from_their_isos_with_the_qemu_builder(tmp_path):
    out, result = _render(tmp_path, FIXTURE)
    assert result.returncode == 0, result.stdout + result.stderr
    hyperv, hv_result = _render(tmp_path, modern_config(), "hyperv", env=MODERN_ENV)
    assert hv_result.returncode == 0, hv_result.stdout + hv_result.stderr
    for box in ("ubuntu-2404", "windows-2022"):
        text = (out / "packer" / f"{box}.pkr.hcl").read_text()
        assert 'source "qemu"' in text and "hyperv" not in text.split("required_plugins", 1)[1].split("}\n}", 1)[0]
        _, qemu = _builder(out, box)
        _, hv = _builder(hyperv, box)
        assert qemu["type"] == "qemu" and hv["type"] == "hyperv-iso"
        assert not qemu.get("disk_image") and qemu["accelerator"] == "kvm" and qemu["cpu_model"] == "host"
        assert qemu["machine_type"] == "q35" and qemu["efi_boot"] is True
        assert (qemu["disk_interface"], qemu["net_device"], qemu["format"]) == ("virtio", "virtio-net", "qcow2")
        # The same installation as on Hyper-V: ISO, checksum, keystrokes, seed or answer-file CD.
        for option in ("iso_checksum", "boot_wait", "boot_command", "cd_label", "communicator", "shutdown_command"):
            assert qemu[option] == hv[option], option
        # The two renders went to different folders (out/, hyperv/): the same files, each from its own render.
        assert [f.replace("/out/", "/hyperv/") for f in qemu["cd_files"]] == hv["cd_files"]
        # The box boots with UEFI on q35: its embedded Vagrantfile says so to vagrant-libvirt.
        parsed, _ = _builder(out, box)
        vagrantfile = parsed["post-processors"][0]["vagrantfile_template"]
        assert vagrantfile.endswith(f"/vagrant/box/{box.split('-')[0]}-libvirt.Vagrantfile")
        shipped = (out / "packer" / "vagrant" / "box" / Path(vagrantfile).name).read_text()
        assert 'libvirt.machine_type = "q35"' in shipped and 'libvirt.loader = "/usr/share/ovmf/OVMF.fd"' in shipped
    _, ubuntu = _builder(out, "ubuntu-2404")
    assert ubuntu["cd_label"] == "cidata" and "first_boot_device" not in ubuntu
    _, windows = _builder(out, "windows-2022")
    assert windows["qemuargs"] == [["-cdrom", str(ROOT / "iso" / "virtio-win-0.1.285.iso")]]


def test_the_answer_file_loads_the_virtio_drivers_only_on_libvirt(tmp_path):
    out, result = _render(tmp_path, FIXTURE)
    assert result.returncode == 0, result.stdout + result.stderr
    hyperv, _ = _render(tmp_path, modern_config(), "hyperv", env=MODERN_ENV)
    unattend = (out / "http" / "windows-2022" / "Autounattend.xml").read_text()
    paths = re.findall(r"<Path>([^<]+)</Path>", unattend)
    for driver in ("viostor", "NetKVM"):
        for letter in "DEF":
            assert f"{letter}:\\{driver}\\2k22\\amd64" in paths
    assert "PnpCustomizationsWinPE" in unattend.split('<settings pass="specialize">')[0]
    assert "PnpCustomizationsWinPE" not in (hyperv / "http" / "windows-2022" / "Autounattend.xml").read_text()


def test_tcg_is_the_accelerator_cluster_yml_names_with_a_cpu_model_tcg_runs(tmp_path):
    out, result = _render(tmp_path, _libvirt(tmp_path, accelerator="tcg"))
    assert result.returncode == 0, result.stdout + result.stderr
    for box in ("ubuntu-2404", "windows-2022"):
        _, qemu = _builder(out, box)
        assert (qemu["accelerator"], qemu["cpu_model"]) == ("tcg", control_plane.qemu_cpu())


def test_a_seed_box_on_libvirt_is_refused_naming_why(tmp_path):
    data = yaml.safe_load(FIXTURE.read_text())
    data["nodes"][1]["box"] = "ubuntu-1604"
    data["network"]["backend"] = "host-gw"
    data["nodes"] = data["nodes"][:2]
    out, result = _render(tmp_path, data)
    assert result.returncode != 0
    assert "nodes[1].box: ubuntu-1604 bakes only for hyperv (build.providers" in result.stdout + result.stderr
    assert not out.exists()


def test_the_option_rules_hold_the_qemu_builders_against_the_plugin(tmp_path):
    out, result = _render(tmp_path, FIXTURE)
    assert result.returncode == 0, result.stdout + result.stderr
    checked, problems = packer_option_rules.check(out)
    assert len(checked) == 2 and problems == []
    template = out / "packer" / "windows-2022.pkr.hcl"
    text = template.read_text()
    planted = text.replace('net_device     = "virtio-net"', 'net_device     = "virtio-nett"', 1)
    planted = planted.replace('qemuargs = [["-cdrom", ', 'qemuargs = [["-drive", ', 1)
    assert planted.count("virtio-nett") == 1 and '["-drive", ' in planted
    template.write_text(planted)
    problems = packer_option_rules.check_qemu(template)
    assert len(problems) == 2
    assert "net_device is 'virtio-nett'" in problems[0] and "packer-plugin-qemu@v1.0.9" in problems[0]
    assert "qemuargs -drive replaces" in problems[1]


def test_the_ci_profiles_disk_image_build_is_the_same_on_either_host(tmp_path):
    """The CI profiles (ci/e2e/boxes, build.builder qemu with an installed disk image) serve both providers
    with one unchanged source: the libvirt e2e bakes its box from them."""
    env = {"K4W_BOX_DIRS": f"{ROOT / 'ci' / 'e2e' / 'boxes'}{__import__('os').pathsep}{ROOT / 'boxes'}"}
    nodes = [{"name": "master", "role": "master", "box": "ubuntu-2404-e2e", "ip": "192.168.250.10", "memory": 2048}]
    hyperv, result = _render(tmp_path, {"nodes": nodes}, "hyperv", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    libvirt, result = _render(tmp_path, {"host": {"provider": "libvirt"}, "nodes": nodes}, "libvirt", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    texts = [(out / "packer" / "ubuntu-2404-e2e.pkr.hcl").read_text().replace(f"/{out.name}/", "/OUT/") for out in (hyperv, libvirt)]
    assert texts[0] == texts[1] and "disk_image = true" in texts[0]


def test_the_plan_names_libvirt_boxes_and_the_missing_virtio_win_iso(tmp_path):
    result = invoke("plan", "--config", str(FIXTURE), "--out", str(tmp_path / "out"))
    text = result.stdout + result.stderr
    assert "Build plan (a Linux host with libvirt runs these" in text
    for box in ("ubuntu-2404", "windows-2022"):
        assert f"boxes/{box}-libvirt.box and catalogue" in text and f"{box}-hyperv.box" not in text
    # This checkout keeps no virtio-win ISO in iso/: the Windows build is blocked, naming the command.
    assert not (ROOT / "iso" / "virtio-win-0.1.285.iso").exists()
    assert "BLOCKED: box windows-2022: a libvirt bake loads the virtio drivers" in text and "invoke iso-add" in text


def test_every_emulated_guest_gets_the_one_emulated_cpu(tmp_path):
    """Packer's tcg bakes, the cluster's libvirt domains and the CI harness's QEMU guests run one CPU model,
    k4w/derive/control_plane.qemu_cpu (qemu64 plus named features). QEMU's "max" adds BMI1/BMI2, which hang
    or panic Ubuntu 26.04's kernel under TCG (control_plane says how it was found); a bake that took it would
    never reach SSH."""
    import json

    from ci.e2e import guest
    from k4w.derive import control_plane

    out, result = _render(tmp_path, _libvirt(tmp_path, accelerator="tcg"))
    assert result.returncode == 0, result.stdout + result.stderr
    wanted = control_plane.qemu_cpu()
    assert wanted.startswith("qemu64,+") and "bmi" not in wanted
    for box in ("ubuntu-2404", "windows-2022"):
        _, qemu = _builder(out, box)
        assert (qemu["accelerator"], qemu["cpu_model"]) == ("tcg", wanted), box
    cluster_json = json.loads((out / "vagrant" / "cluster.json").read_text())["libvirt"]
    assert cluster_json["cpu_model"] + "".join(f",+{f}" for f in cluster_json["cpu_features"]) == \
        wanted.replace("pclmulqdq", "pclmuldq")   # libvirt's name of the same feature
    assert guest.GUEST_CPU == wanted
