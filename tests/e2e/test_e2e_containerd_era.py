"""The CI profile of the containerd era (ci/e2e/boxes/ubuntu-2404-e2e.yml): ubuntu-2404's steps on
the Debian 12 stand-in image, its real binaries from the pinned tool cache (no stand-in), and the box
spec checks of that era."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from k4w.model import config, profiles
from k4w.infra import packer_hcl, pinned_tools
from k4w import render
from k4w.model import pins as pins_mod
from k4w.derive.cluster import Cluster
from k4w.infra.sources import REPO_ROOT as ROOT
from k4w.verify import expect, selection
from k4w.infra.errors import ToolMissing
from ci.e2e import base_image, mirror
from ci.e2e.phases import E2EError
from tests.helpers import config_dict, system_tool, use_sources

E2E_BOXES = ROOT / "ci" / "e2e" / "boxes"
CI = yaml.safe_load((E2E_BOXES / "ubuntu-2404-e2e.yml").read_text())
MODERN = yaml.safe_load((ROOT / "boxes" / "ubuntu-2404.yml").read_text())
DEBIAN = yaml.safe_load((E2E_BOXES / "debian-12-e2e.yml").read_text())
CI_2604 = yaml.safe_load((E2E_BOXES / "ubuntu-2604-e2e.yml").read_text())
MODERN_2604 = yaml.safe_load((ROOT / "boxes" / "ubuntu-2604.yml").read_text())


def assert_twin(ci: dict, production: dict) -> None:
    """A CI box runs its production twin's steps at its Kubernetes and component versions."""
    assert ci["provision"] == production["provision"] and ci["os_family"] == production["os_family"] == "ubuntu"
    ours, theirs = dict(ci["kubernetes"]), dict(production["kubernetes"])
    assert ours.pop("prepull_images") is False  # CI reaches no image registry
    theirs.pop("prepull_images")
    assert ours == theirs
    # Same components, versions and URLs as the production box: the files are built from the tool cache.
    assert {n: (c["version"], c["url"]) for n, c in ci["components"].items()} == \
        {n: (c["version"], c["url"]) for n, c in production["components"].items()}
    assert ci["components"]["containerd"]["cgroup_driver"] == production["components"]["containerd"]["cgroup_driver"]


def test_it_runs_ubuntu_2404s_steps_on_the_debian_12_stand_in_image():
    assert_twin(CI, MODERN)
    assert CI["build"] == DEBIAN["build"] and f"{CI['build']['disk_gb']}G" == base_image.DEBIAN_12.disk_size
    assert CI["ci_base_image"] == DEBIAN["ci_base_image"] == "debian-12"


def test_no_stand_in_and_only_the_hyperv_checks_are_deselected():
    assert "provision_env" not in CI  # K4W_CONTAINERD_STAND_IN is gone: containerd runs in CI
    assert list(CI["skip_checks"]) == ["hyperv_kvp_tools", "hyperv_kvp_active"]
    assert "QEMU" in CI["skip_checks"]["hyperv_kvp_active"]  # no Hyper-V there (issue 21.2)
    assert CI["ci_downloads"] == mirror.REAL and DEBIAN["ci_downloads"] == mirror.SEED
    # No digest written down: the run pins what it packed (k4w-pins.yml).
    assert not [n for n, c in CI["components"].items() if {"sha256", "sha512", "sha256_url"} & set(c)]


# ------------------------------------------------------------------ the real files, from a tool cache


def _tool_cache(root: Path, versions: dict[str, str] | None = None) -> Path:
    """A tool cache in k4w.infra.pinned_tools' layout holding small programs, for the packing logic alone."""
    programs = {"containerd": ("containerd", "containerd-shim-runc-v2", "ctr"), "runc": ("runc",),
                "cni-plugins": ("bridge", "host-local", "loopback", "portmap"),
                "kubernetes-node": ("kubeadm", "kubelet", "kubectl")}
    for tool, names in programs.items():
        version = (versions or {}).get(tool) or pinned_tools.lock()[tool]["version"]
        folder = root / f"{tool}-{version}"
        (folder / "bin").mkdir(parents=True)
        for name in names:
            (folder / "bin" / name).write_bytes(f"#!/bin/sh\necho {tool} {name}\n".encode())
        (folder / "build.json").write_text(json.dumps({"module": tool, "version": version}))
    return root


def _ci_profile(monkeypatch):
    use_sources(monkeypatch, box_folders=(E2E_BOXES,))
    return profiles.load("ubuntu-2404-e2e")


def test_the_real_files_have_the_release_layouts_and_the_run_pins_their_digests(tmp_path, monkeypatch):
    monkeypatch.setenv("K4W_TOOLS_DIR", str(_tool_cache(tmp_path / "tools")))
    profile = _ci_profile(monkeypatch)
    served = mirror.for_profile(profile, "now")
    assert served.stand_ins == []
    components = CI["components"]
    by_url = {f"/{c['url'].split('://', 1)[1]}": name for name, c in components.items()}
    assert set(served.paths) == set(by_url)

    def members(name):
        body = served.paths[next(p for p, n in by_url.items() if n == name)]
        with tarfile.open(fileobj=io.BytesIO(body)) as tar:
            return [m.name for m in tar.getmembers()]

    assert members("containerd") == ["bin", "bin/containerd", "bin/containerd-shim-runc-v2", "bin/ctr"]
    assert members("cni") == [".", "./bridge", "./host-local", "./loopback", "./portmap"]
    assert members("kubernetes") == ["kubernetes", "kubernetes/node", "kubernetes/node/bin", "kubernetes/node/bin/kubeadm",
                                     "kubernetes/node/bin/kubectl", "kubernetes/node/bin/kubelet"]
    runc = served.paths["/github.com/opencontainers/runc/releases/download/v1.5.2/runc.amd64"]
    assert runc == (tmp_path / "tools" / "runc-v1.5.2" / "bin" / "runc").read_bytes()  # the program, no archive
    # The pins are the digests of exactly what is served, for the profile's URLs, and apply to it.
    pins = served.pins["ubuntu-2404-e2e"]
    for path, name in by_url.items():
        assert pins[name]["url"] == components[name]["url"]
        assert pins[name]["sha256"] == hashlib.sha256(served.paths[path]).hexdigest() == served.digests[name]
    applied = pins_mod.apply(profile, served.pins)
    assert all(applied.data.components[n].sha256 == pins[n]["sha256"] for n in components)
    # Reproducible: the same binaries give the same files (a second run reuses the host cache).
    assert mirror.for_profile(profile, "later").paths == served.paths


def test_the_runs_pins_reach_the_fetch_and_the_guests_own_check(tmp_path, monkeypatch):
    """What the run's render phase does: cluster.yml and the pins beside it -> Cluster.resolve -> the
    profile's checksums (the fetch verifies against them) and the step variables (the guest's check)."""
    from k4w.derive.step_env import step_env
    from ci.e2e import cluster_file
    from ci.e2e.run import write_pins

    monkeypatch.setenv("K4W_TOOLS_DIR", str(_tool_cache(tmp_path / "tools")))
    served = mirror.for_profile(_ci_profile(monkeypatch), "now")
    cluster_yml = tmp_path / "cluster.yml"
    cluster_yml.write_text(cluster_file.text("http://10.0.2.2:3128", "http://127.0.0.1:1", str(tmp_path / "cache"),
                                             "ubuntu-2404-e2e"))
    write_pins(cluster_yml, served.pins)
    cluster = Cluster.resolve(config.load(cluster_yml), cluster_yml)
    profile = cluster.profile("ubuntu-2404-e2e")
    env = step_env(profile, cluster).env
    for name in ("containerd", "runc", "cni", "kubernetes"):
        assert profile.data.components[name].sha256 == served.digests[name]
        assert env[f"K4W_{name.upper()}_SHA256"] == served.digests[name]
        assert f"K4W_{name.upper()}_SHA512" not in env


def test_a_missing_tool_cache_names_scripts_build_tools(tmp_path, monkeypatch):
    cache = _tool_cache(tmp_path / "tools")
    (cache / "runc-v1.5.2" / "build.json").unlink()  # an unfinished build counts as missing
    monkeypatch.setenv("K4W_TOOLS_DIR", str(cache))
    with pytest.raises(ToolMissing, match=r"'runc \(runc v1.5.2, tools/lock.yml\)' is not installed. Install it with: "
                                          r"scripts/build-tools"):
        mirror.for_profile(_ci_profile(monkeypatch), "now")


def test_a_cache_of_another_version_or_a_digest_in_the_profile_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("K4W_TOOLS_DIR", str(_tool_cache(tmp_path / "tools")))
    profile = _ci_profile(monkeypatch)
    lock = pinned_tools.lock()
    monkeypatch.setattr(pinned_tools, "lock", lambda: {**lock, "runc": {**lock["runc"], "version": "v1.5.3"}})
    with pytest.raises(E2EError, match="tools/lock.yml builds runc v1.5.3, but the CI profile pins runc 1.5.2"):
        mirror.for_profile(profile, "now")
    monkeypatch.setattr(pinned_tools, "lock", lambda: lock)
    stale = dataclasses.replace(profile, data=profiles.Attr.wrap(
        {**dict(profile.data), "components": {**dict(profile.data.components),
                                              "runc": {**dict(profile.data.components.runc), "sha256": "0" * 64}}}))
    with pytest.raises(E2EError, match="components runc pin a digest"):
        mirror.for_profile(stale, "now")


def test_the_seed_era_names_its_stand_ins(monkeypatch):
    use_sources(monkeypatch, box_folders=(E2E_BOXES,))
    served = mirror.for_profile(profiles.load("debian-12-e2e"), "now")
    assert served.stand_ins == ["cni", "kubernetes"] and served.pins == {}


@pytest.mark.parametrize("tool, program, args, answer", [
    ("containerd", "containerd", "--version", "containerd github.com/containerd/containerd/v2 v2.3.7 "),
    ("containerd", "ctr", "--version", "ctr github.com/containerd/containerd/v2 v2.3.7"),
    ("runc", "runc", "--version", "runc version 1.5.2"),
    ("cni-plugins", "bridge", "--version", "CNI bridge plugin v1.9.1"),
    ("kubernetes-node", "kubeadm", "version -o short", "v1.37.2"),
    ("kubernetes-node", "kubelet", "--version", "Kubernetes v1.37.2"),
    ("kubernetes-node", "kubectl", "version --client", "Client Version: v1.37.2"),
])
def test_the_pinned_tool_cache_answers_what_the_steps_and_the_spec_ask(tool, program, args, answer):
    """The REAL programs the CI box gets (scripts/build-tools must have built them: a missing one
    fails here naming it) report the versions steps 03/04 and the box spec compare."""
    binary = pinned_tools.require(tool, program)
    res = subprocess.run([str(binary), *args.split()], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    # A CNI plugin run without CNI_COMMAND prints its version on standard error
    # (containernetworking/cni@v1.3.0 pkg/skel/skel.go pluginMain).
    assert (res.stdout or res.stderr).splitlines()[0].startswith(answer), res.stdout + res.stderr


@pytest.mark.parametrize("box, profile", [("ubuntu-2404-e2e", CI), ("ubuntu-2604-e2e", CI_2604)])
def test_packer_validates_the_rendered_ci_template(tmp_path, monkeypatch, box, profile):
    """Each containerd-era CI box renders through the Ubuntu template's qemu builder, as the run's
    own one-node cluster.yml (ci/e2e/cluster_file.py) has it."""
    from ci.e2e import cluster_file

    use_sources(monkeypatch, box_folders=(E2E_BOXES,))
    text = cluster_file.text("http://10.0.2.2:3128", "http://127.0.0.1:1", str(tmp_path / "cache"), box)
    cluster = Cluster.resolve(config.parse(text))
    out = tmp_path / "out"
    files = render.render_files(cluster, out)
    assert not [name for name in files if name.startswith(f"http/{box}/")]  # no installer runs
    template = packer_hcl.parse(files[f"packer/{box}.pkr.hcl"])
    steps = [p["script"].rsplit("/", 1)[1] for p in template["provisioners"] if p["type"] == "shell"]
    assert steps == profile["provision"]
    env = template["provisioners"][1]["environment_vars"]
    assert "K4W_CONTAINER_RUNTIME=containerd" in env and not [v for v in env if "STAND_IN" in v]
    out.mkdir()
    (out / "t.pkr.hcl").write_text(files[f"packer/{box}.pkr.hcl"])
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
    good = ("version = 4\n[plugins.'io.containerd.cri.v1.images'.pinned_images]\n  sandbox = 'registry.k8s.io/pause:3.10.2'\n"
            "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]\n  SystemdCgroup = true\n"
            "[plugins.'io.containerd.cri.v1.runtime'.cni]\n  bin_dirs = ['/opt/cni/bin']\n  conf_dir = '/etc/cni/net.d'\n"
            "[plugins.'io.containerd.cri.v1.images'.registry]\n  config_path = '/etc/containerd/certs.d'\n")
    assert expect.containerd_config_problems(good, modern) == []
    v3 = good.replace("version = 4", "version = 3").replace("3.10.2", "3.10.1").replace("= true", "= false").replace(
        "config_path = '/etc/containerd/certs.d'", "config_path = '/etc/containerd/certs.d:/etc/docker/certs.d'")
    assert expect.containerd_config_problems(v3, modern) == [
        "version is 3, not 4 (containerd 2.3 migrates an older schema at every start)", "pinned_images.sandbox is not registry.k8s.io/pause:3.10.2",
        "runc's SystemdCgroup is not true (components.containerd.cgroup_driver)",
        "the registry hosts folder (registry.config_path) is not /etc/containerd/certs.d"]
    assert expect.containerd_config_problems("version = [", modern)[0].startswith("not valid TOML")


def test_the_cni_plugins_expected_follow_the_cni_release(monkeypatch):
    assert "flannel" not in expect.linux_cni_plugins(_profile(monkeypatch, "ubuntu-2404"))
    assert "flannel" in expect.linux_cni_plugins(_profile(monkeypatch, "ubuntu-1604"))
    assert _profile(monkeypatch, "ubuntu-2404-e2e").container_runtime == "containerd"
    assert _profile(monkeypatch, "debian-12-e2e").container_runtime == "docker"


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


def test_the_kubeadm_release_check_passes_the_real_kubeadm_and_fails_on_planted_defects():
    kubeadm = pinned_tools.require("kubernetes-node", "kubeadm")
    real = subprocess.run([str(kubeadm), "version", "-o", "json"], capture_output=True, text=True, timeout=60)
    assert real.returncode == 0, real.stderr
    assert expect.kubeadm_version_problems(real.stdout, "1.37.2") == []
    # Planted: another release; a tree built without the version ldflags; a version-line-only program.
    assert expect.kubeadm_version_problems(real.stdout, "1.37.3") == ["gitVersion is 'v1.37.2', not 'v1.37.3'"]
    unstamped = json.loads(real.stdout)
    unstamped["clientVersion"].update(gitVersion="v0.0.0-master+$Format:%H$", gitTreeState="")
    assert expect.kubeadm_version_problems(json.dumps(unstamped), "1.37.2") == [
        "gitVersion is 'v0.0.0-master+$Format:%H$', not 'v1.37.2'", "gitTreeState is '', not 'clean'"]
    assert expect.kubeadm_version_problems("v1.37.2\n", "1.37.2")[0].startswith("not kubeadm's version record")


# ------------------------------------------------------------------ ubuntu-2604-e2e: the same on Ubuntu 26.04 itself

def test_the_2604_box_runs_ubuntu_2604s_steps_on_a_26_04_image():
    assert_twin(CI_2604, MODERN_2604)
    assert CI_2604["ci_base_image"] == base_image.UBUNTU_2604.name
    assert CI_2604["cgroup_v2_only"] is MODERN_2604["cgroup_v2_only"] is True
    assert not [n for n, c in CI_2604["components"].items() if {"sha256", "sha512", "sha256_url"} & set(c)]
    assert CI_2604["ci_downloads"] == mirror.REAL


def test_on_ubuntu_s_own_kernel_only_the_running_kvp_daemon_is_deselected():
    # The image has linux-cloud-tools for its kernel (the seed's packages), so the KVP tools check runs.
    assert list(CI_2604["skip_checks"]) == ["hyperv_kvp_active"]
    # eth0 as on Hyper-V: the image's netplan file names it, as the installer's does.
    assert "net.ifnames=0" in CI_2604["build"]["qemu"]["append"].split()
    netplan = yaml.safe_load(dict((p, t) for p, _, t in base_image.UBUNTU_2604.files)[base_image.NETPLAN_FILE])
    assert list(netplan["network"]["ethernets"]) == ["eth0"]
