"""Issue 11 item 11: Setup can stop on the product-key page (or install the wrong image).

The preflight reads the ISO's images (host/iso-images.ps1 on a Windows host; here the recorded
lists under tests/fixtures/iso-images/, whose README.md says where each value comes from) and
refuses, before Packer starts, an image index beyond the list, an image name the media lack, an
image that is not Server Core, and media that need a product key while the profile sets none.
The decision is tested in-process; iso-add and build-windows through the real command.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest
import yaml

from k4w.commands import doctor
from k4w.media import iso, iso_add, iso_images
from k4w.model import profiles
from k4w.infra import sources
from k4w.infra import tools
from k4w.derive.cluster import Cluster
from k4w.validate import powershell_rules as powershell
from tests.bake.conftest import ISO_IMAGES, repo  # noqa: F401 - the build tests' miniature repository
from tests.fakes import component_cache
from tests.fakes.packer import PackerOnPath
from tests.helpers import ROOT, config_dict, invoke, tree_digest, write_config

VL = ISO_IMAGES / "windows-server-1803-vl.json"
OEMRET = ISO_IMAGES / "windows-server-1803-oemret.json"
EVAL_2022 = ISO_IMAGES / "windows-server-2022-eval.json"
# The README's example ISO: retail media, as its OEMRET channel token says.
OEMRET_NAME = "17134.1.180410-1804.rs4_release_SERVER_OEMRET_X64FRE_EN-US.iso"
DATACENTER = "Windows Server 2016 SERVERDATACENTERACORE"
DATACENTER_GVLK = "2HXDN-KRXHB-GPYC7-YCKFJ-7FVDG"  # Microsoft's KMS client key, Windows Server, version 1803 Datacenter


def _media(path: Path, **changes) -> iso_images.Media:
    data = json.loads(path.read_text())
    data.update(changes)
    return iso_images.parse(data, f"test copy of {path.name}")


@pytest.fixture
def profile_copy(tmp_path, monkeypatch):
    """edit(change) -> the windows-1803 profile from a copy of boxes/ with change(data) applied."""
    folder = tmp_path / "boxes"
    shutil.copytree(ROOT / "boxes", folder)
    monkeypatch.setattr(sources, "REPO", sources.Sources(root=sources.REPO.root, box_folders=(folder,)))

    def edit(change=lambda data: None) -> profiles.Profile:
        path = folder / "windows-1803.yml"
        data = yaml.safe_load(path.read_text())
        change(data)
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        profiles._load.cache_clear()
        return profiles.load("windows-1803")

    yield edit
    profiles._load.cache_clear()


# ------------------------------------------------------------------ the decision, in-process


def test_volume_licence_media_pass_without_a_product_key():
    verdict = iso_images.check(profiles.load("windows-1803"), _media(VL), Path("D:/isos/server.iso"))
    assert verdict.problems == ()
    assert (verdict.image.index, verdict.image.name) == (2, DATACENTER)
    assert verdict.channel.kind == iso_images.VOLUME and "SSS_X64FREV_EN-US_DV9" in verdict.channel.evidence
    assert "installs without a product key" in verdict.summary()


def test_retail_media_without_a_key_are_refused_naming_the_iso_the_image_and_product_key():
    path = Path("D:/isos") / OEMRET_NAME
    [problem] = iso_images.check(profiles.load("windows-1803"), _media(OEMRET), path).problems
    assert str(path) in problem and f"image 2 '{DATACENTER}'" in problem
    assert "iso.product_key is null in boxes/windows-1803.yml" in problem
    assert "product-key page" in problem
    # what to set: the published KMS client key of exactly this edition
    assert DATACENTER_GVLK in problem and "ServerDatacenterACor" in problem


def test_retail_media_pass_once_the_profile_sets_a_key(profile_copy):
    profile = profile_copy(lambda d: d["iso"].update(product_key=DATACENTER_GVLK))
    verdict = iso_images.check(profile, _media(OEMRET), Path(OEMRET_NAME))
    assert verdict.problems == () and verdict.channel.kind == iso_images.RETAIL


def test_an_index_beyond_the_list_is_refused(profile_copy):
    profile = profile_copy(lambda d: d["iso"].update(index=3))
    [problem] = iso_images.check(profile, _media(VL), Path("server.iso")).problems
    assert f"iso.index is 3 in {profile.path}" in problem and "set iso.index to one of [1, 2]" in problem
    assert "SERVERSTANDARDACORE" in problem and DATACENTER in problem


def test_an_index_that_is_not_the_named_image_is_refused(profile_copy):
    profile = profile_copy(lambda d: d["iso"].update(index=1))
    [problem] = iso_images.check(profile, _media(VL), Path("server.iso")).problems
    assert f"iso.image_name '{DATACENTER}' is image 2" in problem and "(iso.index: 2)" in problem


def test_a_name_the_media_lack_is_refused_with_the_names_they_hold(profile_copy):
    profile = profile_copy(lambda d: d["iso"].update(image_name="Windows Server 2016 SERVERDATACENTERACORE "))
    [problem] = iso_images.check(profile, _media(VL), Path("server.iso")).problems
    assert "is not an image of server.iso" in problem and "differs only in case or spaces" in problem


def test_names_that_are_not_unique_send_the_profile_to_select_by_index():
    data = json.loads(VL.read_text())
    data["images"][0]["name"] = DATACENTER
    [problem] = iso_images.check(profiles.load("windows-1803"), iso_images.parse(data, "test"), Path("x.iso")).problems
    assert "2 images named" in problem and "iso.image_name: null" in problem


LTSC_2016 = {"label": "SSS_X64FREV_EN-US_DV9", "images": [
    {"index": 1, "name": "Windows Server 2016 SERVERSTANDARDCORE", "edition_id": "ServerStandard", "installation_type": "Server Core"},
    {"index": 2, "name": "Windows Server 2016 SERVERSTANDARD", "edition_id": "ServerStandard", "installation_type": "Server"},
]}


def test_an_image_that_is_not_server_core_is_refused(profile_copy):
    profile = profile_copy(lambda d: d["iso"].update(index=2, image_name=None))
    [problem] = iso_images.check(profile, iso_images.parse(LTSC_2016, "test"), Path("2016.iso")).problems
    assert "image 2 'Windows Server 2016 SERVERSTANDARD' (ServerStandard, Server)" in problem
    assert "is not Server Core" in problem and "set iso.index to one of [1]" in problem


@pytest.mark.parametrize("key,refused", [(None, False), (DATACENTER_GVLK, True)])
def test_evaluation_media_need_no_key_and_take_no_other(profile_copy, key, refused):
    profile = profile_copy(lambda d: d["iso"].update(product_key=key, image_name=None))
    media = _media(VL, label="SSS_X64FREE_EN-US_DV9", images=[
        {"index": 2, "name": "Windows Server SERVERDATACENTERCORE", "edition_id": "ServerDatacenterEvalCor", "installation_type": "Server Core"}])
    verdict = iso_images.check(profile, media, Path("eval.iso"))
    assert verdict.channel.kind == iso_images.EVALUATION and "EditionId ServerDatacenterEvalCor" in verdict.channel.evidence
    assert bool(verdict.problems) == refused
    if refused:
        assert "Set iso.product_key: null" in verdict.problems[0]


@pytest.mark.parametrize("label,ei_cfg,file_name,kind", [
    ("SSS_X64FREV_EN-US_DV9", None, None, iso_images.VOLUME),
    ("IR5_SSS_X64FREV_EN-US_DV9", None, None, iso_images.VOLUME),
    ("SSS_X64FREE_EN-US_DV9", None, None, iso_images.EVALUATION),
    ("SSS_X64FRE_EN-US_DV9", None, None, iso_images.RETAIL),
    # ei.cfg speaks before the label
    ("SSS_X64FRE_EN-US_DV9", "[EditionID]\nServerDatacenterACor\n[Channel]\nRetail\n[VL]\n1\n", None, iso_images.VOLUME),
    (None, "[Channel]\r\nOEM\r\n[VL]\r\n0\r\n", None, iso_images.RETAIL),
    # the file name only when the media say nothing
    ("K4W", None, OEMRET_NAME, iso_images.RETAIL),
    ("K4W", None, "17134.1.180410-1804.rs4_release_SERVER_VOL_X64FRE_EN-US.iso", iso_images.VOLUME),
    ("K4W", None, "SW_DVD9_Win_Server_STD_CORE_1803_64Bit_English.ISO", iso_images.VOLUME),
    ("K4W", None, "17134.1.180410-1804.rs4_release_CLIENTENTERPRISEEVAL_OEMRET_x64FRE_en-us.iso", iso_images.EVALUATION),
    ("K4W", None, "windows-server-1803.iso", iso_images.UNKNOWN),
])
def test_the_channel_comes_from_the_media_then_the_file_name(label, ei_cfg, file_name, kind):
    media = _media(VL, label=label, ei_cfg=ei_cfg)
    assert iso_images.channel(media, media.images[1], file_name).kind == kind


def test_media_that_say_nothing_about_their_channel_need_a_key():
    media = _media(VL, label="K4W")
    [problem] = iso_images.check(profiles.load("windows-1803"), media, Path("windows-server-1803.iso")).problems
    assert "may be retail media" in problem and "iso.product_key" in problem


@pytest.mark.parametrize("data,why", [
    ({"images": []}, "non-empty 'images' list"),
    ({"images": [{"index": "2", "name": "x"}]}, "entry 1 needs an integer 'index'"),
    ([], "non-empty 'images' list"),
])
def test_a_malformed_image_list_names_where_it_came_from(data, why):
    with pytest.raises(iso_images.ImagesUnavailable, match=why) as failure:
        iso_images.parse(data, "the recorded image list /tmp/x.json")
    assert "/tmp/x.json" in str(failure.value)


# ------------------------------------------------------------------ where the list comes from


def test_without_windows_or_a_recorded_list_the_check_says_it_runs_on_the_hyperv_host(monkeypatch):
    monkeypatch.delenv(iso_images.FIXTURE_ENV, raising=False)
    monkeypatch.setattr(iso_images.platform, "system", lambda: "Linux")
    monkeypatch.setattr(iso_images.proc, "run", lambda *a, **k: pytest.fail("no PowerShell on Linux"))
    with pytest.raises(iso_images.ImagesUnavailable, match="it runs on the Hyper-V host"):
        iso_images.read_media(Path("server.iso"))


def test_on_windows_the_host_script_is_run_and_its_json_read(monkeypatch):
    monkeypatch.delenv(iso_images.FIXTURE_ENV, raising=False)
    monkeypatch.setattr(iso_images.platform, "system", lambda: "Windows")
    calls = []

    def powershell_exe(argv, **kwargs):
        calls.append(argv)
        return iso_images.proc.Result(argv, 0, VL.read_text(), "")

    monkeypatch.setattr(iso_images.proc, "run", powershell_exe)
    media = iso_images.read_media(Path("C:/isos/server 1803.iso"))
    assert calls == [["powershell.exe", "-NoProfile", "-NonInteractive", "-ExecutionPolicy", "Bypass", "-File",
                      str(sources.REPO.host / "iso-images.ps1"), "-IsoPath", str(Path("C:/isos/server 1803.iso"))]]
    assert [i.name for i in media.images][1] == DATACENTER and "host/iso-images.ps1" in media.origin


def test_a_failing_host_script_is_reported_with_its_output_and_the_elevation_hint(monkeypatch):
    monkeypatch.delenv(iso_images.FIXTURE_ENV, raising=False)
    monkeypatch.setattr(iso_images.platform, "system", lambda: "Windows")
    output = "iso-images failed at line 33: The requested operation requires elevation."
    monkeypatch.setattr(iso_images.proc, "run", lambda argv, **k: iso_images.proc.Result(argv, 1, output, ""))
    with pytest.raises(iso_images.ImagesUnavailable) as failure:
        iso_images.read_media(Path("server.iso"))
    assert output in str(failure.value) and "Run as administrator" in str(failure.value)


def test_the_2022_evaluation_media_pass_by_the_name_setup_matches_not_the_one_get_windowsimage_shows():
    profile = profiles.load("windows-2022")
    verdict = iso_images.check(profile, _media(EVAL_2022), Path("SERVER_EVAL_x64FRE_en-us.iso"))
    assert verdict.problems == ()
    assert verdict.image.index == 3 and verdict.channel.kind == iso_images.EVALUATION
    assert verdict.summary().startswith("image 3 'Windows Server 2022 SERVERDATACENTERCORE' "
                                        "(listed as 'Windows Server 2022 Datacenter Evaluation') (ServerDatacenterEval, Server Core)")


def test_without_the_wim_names_the_display_names_are_compared_and_the_refusal_says_why():
    data = json.loads(EVAL_2022.read_text())
    for image in data["images"]:
        image.pop("wim_name")
    data["wim_names_error"] = r"D:\sources\install.wim keeps its XML data compressed"
    media = iso_images.parse(data, "test copy")
    verdict = iso_images.check(profiles.load("windows-2022"), media, Path("server.iso"))
    [problem] = verdict.problems
    assert "iso.image_name 'Windows Server 2022 SERVERDATACENTERCORE'" in problem
    assert "3 'Windows Server 2022 Datacenter Evaluation'" in problem
    assert "display names: the image NAMEs Setup matches could not be read" in problem and "compressed" in problem


def test_a_wim_name_that_is_not_text_is_a_malformed_list():
    data = json.loads(EVAL_2022.read_text())
    data["images"][0]["wim_name"] = 7
    with pytest.raises(iso_images.ImagesUnavailable, match="entry 1 has a 'wim_name' that is not a string"):
        iso_images.parse(data, "test copy")


def _script_layout() -> dict:
    """The WIM layout host/iso-images.ps1 relies on, read out of the script itself."""
    text = (sources.REPO.host / iso_images.SCRIPT).read_text(encoding="utf-8")
    return {
        "header": int(re.search(r"ReadBytes\((\d+)\)", text)[1]),
        "magic": re.search(r'-ne "([^"]+)"', text)[1].replace("`0", "\0").encode("ascii"),
        "size_at": int(re.search(r"\$header\[(0x[0-9A-F]+) \+ \$i\]", text)[1], 16),
        "flags_at": int(re.search(r"\$header\[(0x[0-9A-F]+)\] -band", text)[1], 16),
        "compressed": int(re.search(r"-band (0x[0-9A-F]+)\)", text)[1], 16),
        "offset_at": int(re.search(r"ToInt64\(\$header, (0x[0-9A-F]+)\)", text)[1], 16),
    }


def test_the_host_scripts_wim_layout_reads_the_names_from_a_wim_written_by_wimlib(tmp_path):
    """The script cannot run here (no PowerShell); its offsets are applied to a real WIM, written
    by wimlib-imagex with a DISPLAYNAME that differs from the NAME, as on the 2022 media."""
    if not shutil.which("wimlib-imagex"):
        pytest.fail(str(tools.missing("wimlib-imagex")))
    wim = tmp_path / "install.wim"
    for number, (name, display) in enumerate([("Windows Server 2022 SERVERSTANDARDCORE", "Windows Server 2022 Standard Evaluation"),
                                              ("Windows Server 2022 SERVERDATACENTERCORE", "Windows Server 2022 Datacenter Evaluation")], 1):
        (tmp_path / f"tree{number}").mkdir()
        (tmp_path / f"tree{number}" / "file").write_text(f"image {number}")
        verb = "capture" if number == 1 else "append"
        subprocess.run(["wimlib-imagex", verb, str(tmp_path / f"tree{number}"), str(wim), name, "--compress=LZX"],
                       check=True, capture_output=True)
        subprocess.run(["wimlib-imagex", "info", str(wim), str(number), "--image-property", f"DISPLAYNAME={display}"],
                       check=True, capture_output=True)
    layout = _script_layout()
    data = wim.read_bytes()
    header = data[:layout["header"]]
    assert header.startswith(layout["magic"]) and len(layout["magic"]) == 8
    assert int.from_bytes(header[8:12], "little") == layout["header"]  # hdr_size
    size = int.from_bytes(header[layout["size_at"]:layout["size_at"] + 7], "little")
    assert not header[layout["flags_at"]] & layout["compressed"]
    offset = int.from_bytes(header[layout["offset_at"]:layout["offset_at"] + 8], "little")
    text = data[offset:offset + size].decode("utf-16-le").lstrip("\ufeff")
    root = ElementTree.fromstring(text)
    assert root.tag == "WIM"
    names = {int(image.get("INDEX")): image.findtext("NAME") for image in root.findall("IMAGE")}
    assert names == {1: "Windows Server 2022 SERVERSTANDARDCORE", 2: "Windows Server 2022 SERVERDATACENTERCORE"}
    assert root.find("IMAGE[@INDEX='2']").findtext("DISPLAYNAME") == "Windows Server 2022 Datacenter Evaluation"


def test_the_host_script_parses_lints_and_prints_what_the_python_reads():
    script = sources.REPO.host / iso_images.SCRIPT
    text = script.read_text(encoding="utf-8")
    assert powershell.parse_errors(script) == [] and powershell.lint_errors(script) == []
    assert "[Parameter(Mandatory = $true)][string]$IsoPath" in text
    for cmdlet in ("Mount-DiskImage", "Get-WindowsImage -ImagePath $imagePath -Index", "Dismount-DiskImage", "ConvertTo-Json"):
        assert cmdlet in text
    # the ISO is dismounted whatever happened while it was mounted
    assert text.index("} finally {") < text.index("Dismount-DiskImage")
    for key in ("index", "name", "wim_name", "description", "edition_id", "installation_type", "label", "image_file", "ei_cfg",
                "wim_names_error", "images"):
        assert f"{key} " in text or f"{key}=" in text.replace(" ", "")


# ------------------------------------------------------------------ iso-add, doctor, build


def _fake_iso(path: Path, label: str) -> Path:
    pvd = bytearray(2048)
    pvd[0:7] = b"\x01CD001\x01"
    pvd[40:72] = label.encode().ljust(32)
    path.write_bytes(bytes(16 * 2048) + bytes(pvd) + b"stand-in for a 5 GB ISO")
    return path


def test_iso_add_refuses_retail_media_without_a_key_and_changes_nothing(tmp_path):
    before = tree_digest(ROOT / "iso")
    source = _fake_iso(tmp_path / OEMRET_NAME, "SSS_X64FRE_EN-US_DV9")
    result = invoke("iso-add", str(source), "--box", "windows-1803", env={iso_images.FIXTURE_ENV: str(OEMRET)})
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "Traceback" not in output
    assert str(source) in output and DATACENTER in output and "iso.product_key" in output and DATACENTER_GVLK in output
    assert "Nothing was recorded or linked" in output
    assert "computing sha256" not in output  # refused before hashing, and it does not claim otherwise
    assert tree_digest(ROOT / "iso") == before


def test_iso_add_refuses_an_index_beyond_the_media_and_changes_nothing(tmp_path):
    before = tree_digest(ROOT / "iso")
    boxes = tmp_path / "boxes"
    shutil.copytree(ROOT / "boxes", boxes)
    data = yaml.safe_load((boxes / "windows-1803.yml").read_text())
    data["iso"]["index"] = 4
    (boxes / "windows-1803.yml").write_text(yaml.safe_dump(data, sort_keys=False))
    source = _fake_iso(tmp_path / "server-1803-vl.iso", "SSS_X64FREV_EN-US_DV9")
    result = invoke("iso-add", str(source), "--box", "windows-1803",
                    env={iso_images.FIXTURE_ENV: str(VL), sources.BOX_DIRS_ENV: str(boxes)})
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "Traceback" not in output, output
    assert "iso.index is 4" in output and "set iso.index to one of [1, 2]" in output
    assert tree_digest(ROOT / "iso") == before


def test_iso_add_records_volume_licence_media_and_reports_the_image(repo, tmp_path):
    repo.isos["windows-1803"].unlink()
    source = _fake_iso(tmp_path / "windows-server-1803.iso", "SSS_X64FREV_EN-US_DV9")
    added = iso_add.iso_add(source, box="windows-1803")
    assert added.placed == "hard-linked"
    assert "images: image 2" in added.note and "volume licence media" in added.note
    assert "windows-server-1803-vl.json" in added.note  # it says the list was a recorded stand-in


def test_iso_add_without_a_way_to_read_images_warns_and_records(repo, tmp_path, monkeypatch):
    monkeypatch.delenv(iso_images.FIXTURE_ENV)
    monkeypatch.setattr(iso_images.platform, "system", lambda: "Linux")
    repo.isos["windows-1803"].unlink()
    added = iso_add.iso_add(_fake_iso(tmp_path / "windows-server-1803.iso", "SSS_X64FRE_EN-US_DV9"), box="windows-1803")
    assert "warning: the ISO's images were not checked here" in added.note and "Hyper-V host" in added.note
    assert yaml.safe_load((repo.root / "iso" / "catalogue.yml").read_text())["windows-server-1803.iso"]


def _doctor_images(repo) -> doctor.Check:
    [check] = [c for c in doctor.iso_checks(repo.cluster()) if c.name == "ISO images for windows-1803"]
    return check


def test_doctor_reports_the_image_setup_installs(repo):
    check = _doctor_images(repo)
    assert check.ok and "image 2" in check.detail and "volume licence" in check.detail and "stand-in" in check.detail


def test_doctor_fails_retail_media_without_a_key(repo, monkeypatch):
    monkeypatch.setenv(iso_images.FIXTURE_ENV, str(OEMRET))
    check = _doctor_images(repo)
    assert not check.ok and check.required_for("build") and "iso.product_key" in check.detail


def test_doctor_off_windows_says_the_image_check_runs_on_the_hyperv_host(repo, monkeypatch):
    monkeypatch.delenv(iso_images.FIXTURE_ENV)
    monkeypatch.setattr(iso_images.platform, "system", lambda: "Linux")
    monkeypatch.setattr(doctor, "_is_windows", lambda: False)
    check = _doctor_images(repo)
    assert not check.ok and "not checked" in check.detail and "Hyper-V host" in check.detail + check.fix


@pytest.fixture
def build_setup(tmp_path, monkeypatch):
    """A profile copy that pins the stand-in ISO's sha256 (and flannel, unpublished upstream), a config,
    and the fake packer first on PATH: what `invoke build-windows --iso` needs to reach Packer here."""
    image = _fake_iso(tmp_path / "server-1803.iso", "SSS_X64FRE_EN-US_DV9")
    boxes = tmp_path / "boxes"
    shutil.copytree(ROOT / "boxes", boxes)
    data = yaml.safe_load((boxes / "windows-1803.yml").read_text())
    data["iso"]["sha256"] = hashlib.sha256(image.read_bytes()).hexdigest()
    data["iso"]["sha256_source"] = "test: the stand-in ISO made by this test"
    data["components"]["flannel"]["sha256"] = "0" * 64  # never downloaded: the fake packer runs no guest step
    data["components"]["flannel"]["checksum_source"] = "test: never downloaded (the fake packer runs no guest step)"
    (boxes / "windows-1803.yml").write_text(yaml.safe_dump(data, sort_keys=False))
    packer = PackerOnPath(tmp_path, monkeypatch, ROOT)
    packer.scenario("windows-1803", "windows-success.txt")
    config = write_config(tmp_path / "cluster.yml", config_dict())
    args = ["build-windows", "--config", str(config), "--out", str(tmp_path / "out"), "--iso", str(image)]
    # build-* fetches first: a stand-in cache of placeholders the fake packer never opens.
    with sources.using(dataclasses.replace(sources.REPO, box_folders=(boxes,))):
        cache = component_cache.seeded_env(tmp_path / "cache", config)
    return args, {sources.BOX_DIRS_ENV: str(boxes), **cache}, packer


def _packer_builds(packer: PackerOnPath) -> list:
    lines = packer.calls_file.read_text().splitlines() if packer.calls_file.exists() else []
    return [c for c in map(json.loads, lines) if c["argv"][:1] == ["build"]]


def test_build_refuses_retail_media_without_a_key_before_packer_starts(build_setup):
    args, env, packer = build_setup
    result = invoke(*args, env={**env, iso_images.FIXTURE_ENV: str(OEMRET)})
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "Traceback" not in output, output
    assert "iso.product_key" in output and DATACENTER_GVLK in output and "server-1803.iso" in output
    assert _packer_builds(packer) == []


def test_build_from_volume_licence_media_reaches_packer_and_says_which_image(build_setup):
    args, env, packer = build_setup
    result = invoke(*args, env={**env, iso_images.FIXTURE_ENV: str(VL)})
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert f"iso images: image 2 '{DATACENTER}'" in output and "volume licence media" in output
    assert len(_packer_builds(packer)) == 1


EVAL_2025 = ISO_IMAGES / "windows-server-2025-eval.json"


def test_the_2025_evaluation_media_pass_by_the_wim_name_its_profile_selects():
    verdict = iso_images.check(profiles.load("windows-2025"), _media(EVAL_2025), Path("server-2025.iso"))
    assert verdict.problems == ()
    assert verdict.image.index == 3 and verdict.channel.kind == iso_images.EVALUATION
    assert verdict.summary().startswith("image 3 'Windows Server 2025 SERVERDATACENTERCORE' "
                                        "(listed as 'Windows Server 2025 Datacenter Evaluation') (ServerDatacenterEval, Server Core)")


def test_2022_media_are_refused_for_the_2025_profile_and_2025_media_for_the_2022_one():
    """The WIM-name check holds each profile to its own media (a planted wrong ISO, both ways)."""
    [problem] = iso_images.check(profiles.load("windows-2025"), _media(EVAL_2022), Path("server.iso")).problems
    assert "iso.image_name 'Windows Server 2025 SERVERDATACENTERCORE'" in problem and "is not an image of server.iso" in problem
    [problem] = iso_images.check(profiles.load("windows-2022"), _media(EVAL_2025), Path("server.iso")).problems
    assert "iso.image_name 'Windows Server 2022 SERVERDATACENTERCORE'" in problem
