"""A box whose image has no bootloader (build.qemu.kernel: the CI e2e boxes) boots on libvirt as its bake did.

Packer's vagrant post-processor `include`s the kernel, the initrd and k4w-direct-boot.json (the names and the
command line) into the box; the box's Vagrantfile (vagrant/box/ubuntu.Vagrantfile) hands them to
vagrant-libvirt. A box with a bootloader carries none of it (tests/render/test_hyperv_unchanged.py holds the
real profiles' templates to what they were).
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
import yaml

from k4w import render
from k4w.derive.cluster import Cluster
from k4w.infra import packer_hcl
from k4w.infra.errors import K4wError
from k4w.model import config as config_mod
from tests.cluster.conftest import libvirt_config
from tests.helpers import ROOT, packer_validate, system_tool, use_sources

E2E_BOXES = ROOT / "ci" / "e2e" / "boxes"
BOX = "ubuntu-2404-e2e"


def e2e_cluster(monkeypatch, folder=E2E_BOXES) -> Cluster:
    use_sources(monkeypatch, box_folders=(ROOT / "boxes", folder))
    data = libvirt_config(**{"nodes.0.box": BOX, "nodes.1.box": BOX})
    data["nodes"] = data["nodes"][:2]
    return Cluster.resolve(config_mod.parse(yaml.safe_dump(data), "test.yml"))


def test_a_directly_booted_box_includes_its_kernel_initrd_and_command_line(monkeypatch, tmp_path):
    files = render.render_files(e2e_cluster(monkeypatch), tmp_path / "out")
    q = yaml.safe_load((E2E_BOXES / f"{BOX}.yml").read_text())["build"]["qemu"]
    boot = json.loads(files[f"packer/direct-boot/{BOX}/k4w-direct-boot.json"])
    assert boot == {"kernel": "vmlinuz", "initrd": "initrd.img", "cmd_line": q["append"]}
    parsed = packer_hcl.parse(files[packer_hcl.rel_path(BOX)], BOX)
    vagrant = next(p for p in parsed["post-processors"] if p["type"] == "vagrant")
    # The same kernel and initrd the build's QEMU booted (qemuargs -kernel/-initrd), and the file above.
    assert vagrant["include"] == [q["kernel"], q["initrd"], f"${{path.root}}/direct-boot/{BOX}/k4w-direct-boot.json"]
    source = next(iter(parsed["builders"]))
    assert ["-kernel", q["kernel"]] in source["qemuargs"] and ["-append", q["append"]] in source["qemuargs"]


def test_a_box_with_a_bootloader_includes_nothing(tmp_path):
    from tests.helpers import modern_config

    files = render.render_files(Cluster.resolve(config_mod.parse(yaml.safe_dump(modern_config()), "t.yml")), tmp_path)
    assert not any("direct-boot" in name for name in files)
    assert not any("include" in text for name, text in files.items() if name.endswith(".pkr.hcl"))


def test_kernel_and_initrd_of_one_name_are_refused_naming_the_profile(monkeypatch, tmp_path):
    """Both are copied into the box under their base names: the second would overwrite the first."""
    folder = tmp_path / "boxes"
    shutil.copytree(E2E_BOXES, folder)
    data = yaml.safe_load((folder / f"{BOX}.yml").read_text())
    data["build"]["qemu"]["initrd"] = "elsewhere/vmlinuz"
    (folder / f"{BOX}.yml").write_text(yaml.safe_dump(data))
    with pytest.raises(K4wError, match=f"{BOX}.yml: build.qemu kernel/initrd file names vmlinuz would collide"):
        render.render_files(e2e_cluster(monkeypatch, folder), tmp_path / "out")


@pytest.mark.tools
def test_packer_accepts_the_include(monkeypatch, tmp_path):
    """The pinned packer-plugin-vagrant (v1.0.3) knows `include` (a list of paths)."""
    out = tmp_path / "out"
    render.write_atomically(render.render_files(e2e_cluster(monkeypatch), out), out)
    result = packer_validate(out / packer_hcl.rel_path(BOX), cwd=out, variables={"iso_path": "x"})
    assert result.returncode == 0, result.stdout + result.stderr


# The box Vagrantfile under a stand-in for Vagrant's config objects: what it sets, loaded from a box folder
# with Kernel.load, as Vagrant loads it (its docstring cites where).
RUBY_STUB = r'''
class Recorder
  def initialize(path) ; @path = path ; end
  def method_missing(name, *args, &block)
    if name.to_s.end_with?("=")
      $set["#{@path}.#{name.to_s.chomp('=')}"] = args.first
      return
    end
    child = Recorder.new("#{@path}.#{name}#{args.empty? ? '' : "(#{args.first})"}")
    block ? block.call(child) : child
  end
  def respond_to_missing?(*) ; true ; end
end
module Vagrant
  def self.configure(_version) ; yield Recorder.new("config") ; end
end
$set = {}
Kernel.load ARGV[0]
puts JSON.generate($set)
'''


def box_vagrantfile_settings(box_folder) -> dict:
    ruby = system_tool("ruby")
    stub = box_folder.parent / "stub.rb"
    stub.write_text("require 'json'\n" + RUBY_STUB)
    done = subprocess.run([ruby, str(stub), str(box_folder / "Vagrantfile")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.tools
def test_the_box_vagrantfile_boots_libvirt_from_the_files_beside_it(tmp_path):
    box = tmp_path / "box"   # a box folder as Vagrant unpacks it
    box.mkdir()
    shutil.copyfile(ROOT / "vagrant" / "box" / "ubuntu.Vagrantfile", box / "Vagrantfile")
    (box / "k4w-direct-boot.json").write_text(json.dumps({"kernel": "vmlinuz", "initrd": "initrd.img",
                                                          "cmd_line": "root=/dev/vda ro console=ttyS0"}))
    settings = box_vagrantfile_settings(box)
    lv = "config.vm.provider(libvirt)"
    assert settings[f"{lv}.kernel"] == str(box / "vmlinuz") and settings[f"{lv}.initrd"] == str(box / "initrd.img")
    assert settings[f"{lv}.cmd_line"] == "root=/dev/vda ro console=ttyS0"


@pytest.mark.tools
def test_a_box_without_the_file_sets_no_libvirt_boot(tmp_path):
    box = tmp_path / "box"
    box.mkdir()
    shutil.copyfile(ROOT / "vagrant" / "box" / "ubuntu.Vagrantfile", box / "Vagrantfile")
    settings = box_vagrantfile_settings(box)
    assert not any("libvirt" in key for key in settings) and settings["config.ssh.username"] == "vagrant"
