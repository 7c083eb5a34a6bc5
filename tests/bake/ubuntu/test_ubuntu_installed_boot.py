"""What both Ubuntu installers leave for the installed system to boot, and what Packer's HTTP server
serves: the rendered late commands run for real here, against a fake ESP and a fake efibootmgr
(the process boundary), through the real `invoke render`.

- the UEFI fallback loader: exactly the named files, whatever else the ESP holds (issue 21.4);
- the installed system's entry leads BootOrder, or the install fails (issue 21.3);
- no file that Packer's HTTP server serves holds the proxy's credentials, for every box (issue 21.5).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from k4w.media import build_media
from k4w.infra import packer_hcl
from k4w.model import profiles
from tests.helpers import config_dict, invoke, write_config

PROXY = "http://bob:s3cr%40t$x;y@proxy.corp.example:3128"
USERINFO = "bob:s3cr%40t$x;y"
HTTPS_PROXY = "http://carol:hunter2@secure-proxy.corp.example:3129"
BOXES = ("ubuntu-1604", "ubuntu-2404")


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict[str, Path]:
    """Both installer kinds, each from a real render of its own era's cluster (the ubuntu-1604 preseed,
    the ubuntu-2404 autoinstall; one cluster cannot hold both: version skew), behind a proxy that
    demands credentials on both URLs. Box name -> its render's output folder."""
    folder = tmp_path_factory.mktemp("installed-boot")
    outs = {}
    for box in BOXES:
        data = config_dict(**{"proxy.http": PROXY, "proxy.https": HTTPS_PROXY})
        for node in data["nodes"]:
            if not node["box"].startswith("windows-"):
                node["box"] = box
        if box != "ubuntu-1604":
            data["nodes"] = [n for n in data["nodes"] if not n["box"].startswith("windows-")]
        cfg = write_config(folder / f"{box}.yml", data)
        outs[box] = folder / box
        res = invoke("render", "--config", str(cfg), "--out", str(outs[box]))
        assert res.returncode == 0, res.stdout + res.stderr
    return outs


def preseed_late_commands(out: Path) -> list[str]:
    text = (out / "http" / "ubuntu-1604" / "preseed.cfg").read_text()
    joined = re.sub(r"\\\n", "", text)
    (line,) = [l for l in joined.splitlines() if l.startswith("d-i preseed/late_command string ")]
    return [c.strip() for c in line.removeprefix("d-i preseed/late_command string ").split(" && ")]


def autoinstall_late_commands(out: Path) -> list[str]:
    return yaml.safe_load((out / "http" / "ubuntu-2404" / "user-data").read_text())["autoinstall"]["late-commands"]


LATE_COMMANDS = {"ubuntu-1604": preseed_late_commands, "ubuntu-2404": autoinstall_late_commands}


# ------------------------------------------------------------------ the fallback loader (21.4)


def fake_esp(root: Path) -> Path:
    """/target/boot/efi as grub-install leaves it, plus a subfolder (what made `cp EFI/ubuntu/*` fail)."""
    ubuntu = root / "boot" / "efi" / "EFI" / "ubuntu"
    (ubuntu / "fw").mkdir(parents=True)
    (ubuntu / "fw" / "fwupdx64.efi").write_bytes(b"fwupd")
    for name, content in {"shimx64.efi": b"shim", "grubx64.efi": b"grub", "grub.cfg": b"search.fs_uuid x root\n",
                          "mmx64.efi": b"mok", "BOOTX64.CSV": b"shimx64.efi,ubuntu\n"}.items():
        (ubuntu / name).write_bytes(content)
    return root / "boot" / "efi" / "EFI"


@pytest.mark.parametrize("box", BOXES)
def test_the_fallback_loader_commands_copy_exactly_the_boot_chain_from_an_esp_with_a_subfolder(rendered, tmp_path, box):
    commands = [c for c in LATE_COMMANDS[box](rendered[box]) if "/target/boot/efi" in c]
    assert commands, f"{box}: no late command touches the ESP"
    root = tmp_path / "target"
    esp = fake_esp(root)
    for command in commands:
        # The late commands name the installed system as /target; here it is a folder of our own.
        res = subprocess.run(["sh", "-c", command.replace("/target", str(root))], capture_output=True, text=True, check=False)
        assert res.returncode == 0, f"{box}: {command!r} failed: {res.stderr}"
    boot = esp / "BOOT"
    assert sorted(p.name for p in boot.iterdir()) == ["bootx64.efi", "grub.cfg", "grubx64.efi"]
    assert (boot / "bootx64.efi").read_bytes() == b"shim"  # the firmware's fallback path starts shim
    assert (boot / "grubx64.efi").read_bytes() == b"grub"  # which loads grubx64.efi from its own folder
    assert (boot / "grub.cfg").read_bytes() == (esp / "ubuntu" / "grub.cfg").read_bytes()


@pytest.mark.parametrize("box", BOXES)
def test_a_missing_boot_file_fails_the_fallback_loader_commands(rendered, tmp_path, box):
    commands = [c for c in LATE_COMMANDS[box](rendered[box]) if "/target/boot/efi" in c]
    root = tmp_path / "target"
    esp = fake_esp(root)
    (esp / "ubuntu" / "grubx64.efi").unlink()
    results = [subprocess.run(["sh", "-c", c.replace("/target", str(root))], capture_output=True, check=False).returncode
               for c in commands]
    assert any(results), f"{box}: the ESP commands succeeded without grubx64.efi"


# ------------------------------------------------------------------ BootOrder (21.3)

# A stand-in for efibootmgr with Hyper-V Generation 2's entries after the install: Packer put the
# DVD first (first_boot_device), grub-install added ubuntu. State lives in $EFI_STATE (JSON).
FAKE_EFIBOOTMGR = r'''#!/usr/bin/env python3
import json, os, sys
path = os.environ["EFI_STATE"]
state = json.load(open(path))
args = sys.argv[1:]
if args[:1] == ["-o"]:
    if state.get("refuse_order"):
        print("Could not set BootOrder: Invalid argument", file=sys.stderr)
        sys.exit(5)
    if not state.get("ignore_order"):
        state["order"] = args[1].split(",")
    json.dump(state, open(path, "w"))
    sys.exit(0)
print("BootCurrent: 0001")
print("BootOrder: " + ",".join(state["order"]))
for number, (label, path_) in state["entries"].items():
    print(f"Boot{number}* {label}" + (f"\t{path_}" if "-v" in args else ""))
'''

HYPERV_ENTRIES = {
    "0000": ["EFI SCSI Device", "VenHw(9dea862c-5cdd-4e70-acc1-f32b344d4795,...)/Scsi(0,0)"],
    "0001": ["EFI SCSI Device", "VenHw(9dea862c-5cdd-4e70-acc1-f32b344d4795,...)/Scsi(0,1)"],
    "0002": ["EFI Network", "VenHw(9dea862c-5cdd-4e70-acc1-f32b344d4795,...)/MAC(00155d000001,0)"],
    "000A": ["ubuntu", "HD(1,GPT,1b7e6f4c-...,0x800,0x100000)/File(\\EFI\\ubuntu\\shimx64.efi)"],
}


def boot_first_scripts(outs: dict[str, Path]) -> dict[str, str]:
    """The script each installer runs inside the target to order the boot entries."""
    found = {}
    for box, late in LATE_COMMANDS.items():
        (command,) = [c for c in late(outs[box]) if "efibootmgr" in c]
        argv = shlex.split(command)
        assert argv[-3:-1] == ["sh", "-c"] and argv[0] in ("in-target", "curtin"), command  # run in the target
        found[box] = argv[-1]
    return found


def run_boot_first(script: str, tmp_path: Path, **state) -> tuple[subprocess.CompletedProcess, dict]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    tool = bin_dir / "efibootmgr"
    tool.write_text(FAKE_EFIBOOTMGR)
    tool.chmod(0o755)
    state_file = tmp_path / "efi.json"
    state_file.write_text(json.dumps({"order": ["0001", "0000", "0002", "000A"], "entries": HYPERV_ENTRIES, **state}))
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "EFI_STATE": str(state_file)}
    res = subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env, check=False)
    return res, json.loads(state_file.read_text())


def test_both_installers_run_the_same_boot_order_script(rendered):
    scripts = boot_first_scripts(rendered)
    assert scripts["ubuntu-1604"] == scripts["ubuntu-2404"]


@pytest.mark.parametrize("box", BOXES)
def test_the_installed_system_leads_boot_order_and_the_rest_keep_their_order(rendered, tmp_path, box):
    res, state = run_boot_first(boot_first_scripts(rendered)[box], tmp_path)
    assert res.returncode == 0, res.stderr
    assert state["order"] == ["000A", "0001", "0000", "0002"]  # the DVD (0001) no longer first
    # A second run (the installer retried) changes nothing.
    res, again = run_boot_first(boot_first_scripts(rendered)[box], tmp_path, order=state["order"])
    assert res.returncode == 0 and again["order"] == state["order"]


@pytest.mark.parametrize("state, message", [
    ({"entries": {k: v for k, v in HYPERV_ENTRIES.items() if k != "000A"}, "order": ["0001", "0000", "0002"]},
     "no UEFI boot entry for EFI/ubuntu"),
    ({"refuse_order": True}, "efibootmgr -o 000A,0001,0000,0002 failed"),
    ({"ignore_order": True}, "BootOrder starts with 0001, not the installed system Boot000A"),
])
def test_the_boot_order_script_fails_the_install_when_it_cannot_put_the_system_first(rendered, tmp_path, state, message):
    res, _ = run_boot_first(boot_first_scripts(rendered)["ubuntu-1604"], tmp_path, **state)
    assert res.returncode != 0
    assert message in res.stderr


# ------------------------------------------------------------------ what Packer serves (21.5)


@pytest.mark.parametrize("box", BOXES)
def test_no_file_packer_serves_holds_the_proxys_credentials(rendered, box):
    template = packer_hcl.load(rendered[box] / "packer" / f"{box}.pkr.hcl")
    (builder,) = template["builders"]
    served = Path(builder["http_directory"])
    assert served == build_media.served_folder(rendered[box], profiles.load(box))
    files = [p for p in served.rglob("*") if p.is_file()]
    assert files or box == "ubuntu-2404"  # the autoinstall box serves only components/ (staged by build-*)
    for path in files:
        text = path.read_text(errors="replace")
        for secret in (USERINFO, "carol:hunter2", "s3cr%40t", "hunter2"):
            assert secret not in text, f"{path} (served by Packer's HTTP server) holds {secret!r}"
        assert not re.search(r"https?://[^/\s@]+@", text), f"{path} holds a URL with userinfo"


def test_the_preseed_box_gets_the_credentials_on_its_boot_line_as_the_masked_packer_variable(rendered):
    template = packer_hcl.load(rendered["ubuntu-1604"] / "packer" / "ubuntu-1604.pkr.hcl")
    (line,) = [c for c in template["builders"][0]["boot_command"] if c.startswith("linux ")]
    assert "'k4w_installer_proxy=${var.http_proxy}'" in line
    assert line.endswith(" ---<enter>")  # nothing of the boot line reaches the installed system's GRUB
    assert "proxy.corp.example" not in line and USERINFO not in line
    assert "http_proxy" in template["sensitive-variables"]


def test_the_preseed_early_command_takes_the_credentials_from_the_boot_line(rendered, tmp_path):
    text = (rendered["ubuntu-1604"] / "http" / "ubuntu-1604" / "preseed.cfg").read_text()
    (line,) = [l for l in text.splitlines() if l.startswith("d-i preseed/early_command string ")]
    command = line.removeprefix("d-i preseed/early_command string ")
    assert "d-i mirror/http/proxy string http://proxy.corp.example:3128/\n" in text  # no userinfo
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "debconf"
    # The kernel command line after GRUB removed the single quotes.
    cmdline = f"BOOT_IMAGE=/install/vmlinuz auto=true k4w_installer_proxy={PROXY} ---"
    (bin_dir / "cat").write_text(f"#!/bin/sh\nprintf '%s\\n' {shlex.quote(cmdline)}\n")
    (bin_dir / "debconf-set").write_text(f"#!/bin/sh\nprintf '%s=%s\\n' \"$1\" \"$2\" >> {shlex.quote(str(record))}\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    res = subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=env, check=False)
    assert res.returncode == 0, res.stderr
    assert record.read_text() == f"mirror/http/proxy={PROXY}\n"
    # Without the parameter the install stops at once, naming why.
    (bin_dir / "cat").write_text("#!/bin/sh\necho 'BOOT_IMAGE=/install/vmlinuz auto=true ---'\n")
    res = subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=env, check=False)
    assert res.returncode != 0 and "no k4w_installer_proxy=" in res.stderr
