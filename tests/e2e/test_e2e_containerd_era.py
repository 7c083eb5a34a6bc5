"""The CI profile of the containerd era (tests/e2e/boxes/ubuntu-2404-e2e.yml): ubuntu-2404's steps on
the Debian 12 stand-in image, its CI stand-ins, and the box spec checks of that era."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from k4w import config, packer_hcl, profiles, render
from k4w.cluster_model import Cluster
from k4w.sources import REPO_ROOT as ROOT
from k4w.verify import expect, selection
from tests.e2e.harness import base_image, stand_ins
from tests.helpers import config_dict, system_tool, use_sources

E2E_BOXES = ROOT / "tests" / "e2e" / "boxes"
CI = yaml.safe_load((E2E_BOXES / "ubuntu-2404-e2e.yml").read_text())
MODERN = yaml.safe_load((ROOT / "boxes" / "ubuntu-2404.yml").read_text())
DEBIAN = yaml.safe_load((E2E_BOXES / "debian-12-e2e.yml").read_text())


def test_it_runs_ubuntu_2404s_steps_on_the_debian_12_stand_in_image():
    assert CI["provision"] == MODERN["provision"] and CI["os_family"] == "ubuntu"
    assert CI["build"] == DEBIAN["build"] and f"{CI['build']['disk_gb']}G" == base_image.DISK_SIZE
    ours, theirs = dict(CI["kubernetes"]), dict(MODERN["kubernetes"])
    assert ours.pop("prepull_images") is False  # no containerd runs in CI, and CI reaches no registry
    theirs.pop("prepull_images")
    assert ours == theirs
    # Same components and versions as the production box: only the files are stand-ins.
    assert {n: c["version"] for n, c in CI["components"].items()} == {n: c["version"] for n, c in MODERN["components"].items()}
    assert CI["components"]["containerd"]["cgroup_driver"] == MODERN["components"]["containerd"]["cgroup_driver"]


def test_the_stand_in_is_named_and_the_deselected_checks_say_why():
    assert CI["provision_env"] == {"K4W_CONTAINERD_STAND_IN": "1"}
    assert list(CI["skip_checks"]) == ["containerd_running", "hyperv_kvp_tools", "hyperv_kvp_active"]
    assert "stand-in" in CI["skip_checks"]["containerd_running"]
    assert "QEMU" in CI["skip_checks"]["hyperv_kvp_active"]  # no Hyper-V there (issue 21.2)
    assert all("STAND-IN" in spec["checksum_source"] for spec in CI["components"].values())


def test_the_ci_stand_ins_are_the_files_the_profile_pins():
    components = CI["components"]
    built = stand_ins.for_profile(components)
    assert set(built) == {spec["url"] for spec in components.values()}
    for name, spec in components.items():
        algorithm = "sha512" if "sha512" in spec else "sha256"
        assert getattr(hashlib, algorithm)(built[spec["url"]]).hexdigest() == spec[algorithm], name
    assert stand_ins.for_profile(components) == built  # reproducible
    with tarfile.open(fileobj=io.BytesIO(built[components["cni"]["url"]])) as tar:
        assert "./flannel" not in tar.getnames()  # containernetworking/plugins v1.x has no flannel plugin


@pytest.mark.parametrize("member, args, answer", [
    ("bin/containerd", "--version", "containerd github.com/containerd/containerd/v2 v2.3.2 k4w-ci-stand-in"),
    ("kubernetes/node/bin/kubectl", "version --client", "Client Version: v1.35.4"),
    ("kubernetes/node/bin/kubeadm", "version -o short", "v1.35.4"),
])
def test_the_stand_ins_answer_what_the_steps_and_the_spec_ask(tmp_path, member, args, answer):
    builder = stand_ins.containerd_tarball("2.3.2") if member.startswith("bin/") else stand_ins.node_tarball("1.35.4")
    with tarfile.open(fileobj=io.BytesIO(builder)) as tar:
        info = tar.getmember(member)
        program = tmp_path / Path(member).name
        program.write_bytes(tar.extractfile(info).read())  # no extraction filter: CI's Python 3.11.2 lacks it
    program.chmod(info.mode)
    res = subprocess.run([str(program), *args.split()], capture_output=True, text=True)
    assert res.returncode == 0 and res.stdout.strip() == answer
    assert expect.reported_version(res.stdout) in ("2.3.2", "1.35.4")
    runc = tmp_path / "runc"
    runc.write_bytes(stand_ins.runc_binary("1.4.3"))
    runc.chmod(0o755)
    assert subprocess.run([str(runc), "--version"], capture_output=True, text=True).stdout.splitlines()[0] == "runc version 1.4.3"


def test_packer_validates_the_rendered_ci_template(tmp_path, monkeypatch):
    """The CI box renders through the Ubuntu template's qemu builder beside a seed-era master (a
    1.35 master needs the kubeadm v1beta4 template of the modern stack)."""
    use_sources(monkeypatch, box_folders=(E2E_BOXES,))
    data = config_dict()
    data["nodes"][1]["box"] = "ubuntu-2404-e2e"
    cluster = Cluster.resolve(config.parse(yaml.safe_dump(data)))
    out = tmp_path / "out"
    files = render.render_files(cluster, out)
    assert not [name for name in files if name.startswith("http/ubuntu-2404-e2e/")]  # no installer runs
    template = packer_hcl.parse(files["packer/ubuntu-2404-e2e.pkr.hcl"])
    steps = [p["script"].rsplit("/", 1)[1] for p in template["provisioners"] if p["type"] == "shell"]
    assert steps == CI["provision"]
    env = template["provisioners"][1]["environment_vars"]
    assert "K4W_CONTAINERD_STAND_IN=1" in env and "K4W_CONTAINER_RUNTIME=containerd" in env
    out.mkdir()
    (out / "t.pkr.hcl").write_text(files["packer/ubuntu-2404-e2e.pkr.hcl"])
    res = subprocess.run([system_tool("packer"), "validate", "-syntax-only", str(out / "t.pkr.hcl")], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


# ------------------------------------------------------------------ box spec of the era


def _profile(monkeypatch, name: str) -> profiles.Profile:
    use_sources(monkeypatch, box_folders=(E2E_BOXES,))
    return profiles.load(name)


def test_a_check_about_a_component_applies_only_to_boxes_that_pin_it():
    checks = [selection.Check("docker", component="docker"), selection.Check("containerd", component="containerd"),
              selection.Check("swap")]
    reasons = selection.deselection_reasons(checks, {}, "box", "x", components={"containerd", "runc"})
    assert reasons == ["the profile pins no components.docker: this box's era has none", None, None]
    assert selection.deselection_reasons(checks, {}, "box", "x") == [None, None, None]  # not a box spec


def test_the_spec_reads_the_config_the_step_writes(monkeypatch):
    modern = _profile(monkeypatch, "ubuntu-2404")
    good = ("version = 3\n[plugins.'io.containerd.cri.v1.images'.pinned_images]\n  sandbox = 'registry.k8s.io/pause:3.10.1'\n"
            "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]\n  SystemdCgroup = true\n"
            "[plugins.'io.containerd.cri.v1.runtime'.cni]\n  bin_dirs = ['/opt/cni/bin']\n  conf_dir = '/etc/cni/net.d'\n")
    assert expect.containerd_config_problems(good, modern) == []
    v2 = good.replace("version = 3", "version = 2").replace("3.10.1", "3.10.2").replace("= true", "= false")
    assert expect.containerd_config_problems(v2, modern) == [
        "version is 2, not 3 (containerd 2.x)", "pinned_images.sandbox is not registry.k8s.io/pause:3.10.1",
        "runc's SystemdCgroup is not true (components.containerd.cgroup_driver)"]
    assert expect.containerd_config_problems("version = [", modern)[0].startswith("not valid TOML")


def test_the_cni_plugins_expected_follow_the_cni_release(monkeypatch):
    assert "flannel" not in expect.linux_cni_plugins(_profile(monkeypatch, "ubuntu-2404"))
    assert "flannel" in expect.linux_cni_plugins(_profile(monkeypatch, "ubuntu-1604"))
    assert expect.container_runtime(_profile(monkeypatch, "ubuntu-2404-e2e")) == "containerd"
    assert expect.container_runtime(_profile(monkeypatch, "debian-12-e2e")) == "docker"


def test_the_spec_asks_the_runtime_binaries_where_step_03_installs_them():
    """By path: a login user's PATH on Debian lacks /usr/local/sbin, where runc goes (found by the e2e run)."""
    import ast

    # Read, not imported: the spec module is collected only by the box-spec run, with its markers.
    spec = ast.parse((ROOT / "k4w" / "verify" / "specs" / "test_ubuntu_box.py").read_text(encoding="utf-8"))
    [paths] = [ast.literal_eval(node.value) for node in spec.body
               if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "RUNTIME_BINARIES"]
    step = (ROOT / "guest" / "ubuntu" / "bake" / "03-containerd.sh").read_text(encoding="utf-8")
    assert f"RUNC={paths['runc']}\n" in step
    assert f"BIN_DIR={paths['containerd'].rsplit('/', 1)[0]}\n" in step
