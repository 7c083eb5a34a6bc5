"""The containerd era's guest steps (ubuntu-2404: 03-containerd.sh, 04-kubernetes-node.sh) and what
step 01 does for that era, run for real in a sandbox root (K4W_ROOT): files, refusals, idempotence.

The served files are small placeholders in the real release layouts (the sandbox runs no program of
theirs), behind a local stand-in for Packer's HTTP server, as in a build. The live half (containerd
running with this config, its effective config, the real versions) runs in the CI bake of
ubuntu-2404-e2e with the real binaries (ci/e2e/release_files.py); the image pre-pull on Hyper-V.
"""

from __future__ import annotations

import dataclasses
import hashlib
import subprocess
import tomllib

import pytest
import yaml

from k4w.derive import containerd_config, step_env as derive_steps
from k4w.infra import pinned_tools
from k4w.model import profiles
from k4w.verify import expect
from ci.e2e import archives, seed_stand_ins
from tests.fakes import local_http

from .conftest import HTTP_PROXY, HTTPS_PROXY, ROOT, cluster, make_root, run_step, snapshot

PROFILE = yaml.safe_load((ROOT / "boxes" / "ubuntu-2404.yml").read_text())
PAUSE = PROFILE["kubernetes"]["pause_image"]
PLACEHOLDER = b"#!/bin/sh\n# placeholder in a release layout: the sandbox never runs it\nexit 3\n"
# What each component is served as: its release layout (release_files.py names the upstream sources).
BUILDERS = {"containerd": lambda version: archives.tar_gz({f"bin/{name}": PLACEHOLDER for name in
                                                         ("containerd", "containerd-shim-runc-v2", "ctr")}),
            "runc": lambda version: PLACEHOLDER,
            "cni": seed_stand_ins.cni_tarball, "kubernetes": seed_stand_ins.node_tarball}


def step_env() -> dict[str, str]:
    """ubuntu-2404's real step variables (names and values from its profile), without the proxy."""
    env = derive_steps.step_env(profiles.load("ubuntu-2404"), cluster()).env
    # K4W_LIB is where Packer uploads lib.sh; run here, each step finds it beside itself.
    return {name: value for name, value in env.items() if name.startswith("K4W_") and name != "K4W_LIB"}


@pytest.fixture
def served():
    """Packer's HTTP server with the four downloads where the box serves them (K4W_MEDIA_URL_PATH: the
    build-media folder is its root) under their build-media names, both from the real step variables,
    and the environment with each digest pinned to the served file."""
    env = step_env()
    files, digests = {}, {}
    for component, build in BUILDERS.items():
        body = build(PROFILE["components"][component]["version"])
        files[env["K4W_MEDIA_URL_PATH"] + env[f"K4W_{component.upper()}_FILE"]] = body
        key = "SHA512" if component == "kubernetes" else "SHA256"
        digests[f"K4W_{component.upper()}_{key}"] = getattr(hashlib, key.lower())(body).hexdigest()
    with local_http.site(files) as site:
        yield {**env, **digests, "PACKER_HTTP_ADDR": site.url.removeprefix("http://")}, site, files


def test_the_profile_pins_what_each_step_reads():
    env = step_env()
    assert env["K4W_CONTAINER_RUNTIME"] == "containerd"
    assert env["K4W_CONTAINERD_FILE"] == "containerd-containerd-2.3.7-linux-amd64.tar.gz"
    assert env["K4W_RUNC_FILE"] == "runc-runc.amd64" and env["K4W_PAUSE_IMAGE"] == PAUSE
    assert env["K4W_KUBE_CRI_SOCKET"] == "unix:///var/run/containerd/containerd.sock"
    assert "K4W_CONTAINERD_URL" not in env  # the guest never downloads: it copies from the build host
    assert env["K4W_CONTAINERD_CONFIG_VERSION"] == "4"


@pytest.mark.parametrize("value", ["", "3.0", "4; rm -rf /"])
def test_step_03_refuses_a_config_version_that_is_not_a_schema_number(tmp_path, served, value):
    env, _, _ = served
    res = run_step("03-containerd.sh", make_root(tmp_path, "ubuntu-24.04"), **{**env, "K4W_CONTAINERD_CONFIG_VERSION": value})
    assert res.returncode != 0 and "K4W_CONTAINERD_CONFIG_VERSION" in res.stderr, res.stderr
    assert not (tmp_path / "root" / "etc" / "containerd" / "config.toml").exists()


def test_containerd_runc_cni_and_config_version_4_then_idempotent_without_the_build_host(tmp_path, served):
    env, site, files = served
    root = make_root(tmp_path, "ubuntu-24.04")
    res = run_step("03-containerd.sh", root, **env)
    assert res.returncode == 0, res.stderr
    bin_dir = root / "usr" / "local" / "bin"
    assert sorted(p.name for p in bin_dir.iterdir()) == ["containerd", "containerd-shim-runc-v2", "ctr"]
    assert (root / "usr" / "local" / "sbin" / "runc").stat().st_mode & 0o777 == 0o755
    assert sorted(p.name for p in (root / "opt" / "cni" / "bin").iterdir()) == ["bridge", "host-local", "loopback", "portmap"]
    assert (root / "etc" / "cni" / "net.d").is_dir()
    text = (root / "etc" / "containerd" / "config.toml").read_text()
    config = tomllib.loads(text)
    assert config["version"] == 4  # containerd 2.3.7's own ConfigVersion (k4w/derive/containerd_config.py)
    assert config["plugins"]["io.containerd.cri.v1.images"]["pinned_images"] == {"sandbox": PAUSE}
    assert config["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]["runc"]["options"] == {"SystemdCgroup": True}
    # The box spec's reading of the same file agrees.
    assert expect.containerd_config_problems(text, profiles.load("ubuntu-2404")) == []
    unit = (root / "etc" / "systemd" / "system" / "containerd.service").read_text()
    for line in ("ExecStart=/usr/local/bin/containerd", "Type=notify", "Delegate=yes", "KillMode=process"):
        assert line in unit
    assert sorted(r["path"] for r in site.requests) == sorted(p for p in files if "kubernetes" not in p)

    before = snapshot(root)
    requests = len(site.requests)
    res = run_step("03-containerd.sh", root, **{k: v for k, v in env.items() if k != "PACKER_HTTP_ADDR"})
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("already installed") == 3 and len(site.requests) == requests
    assert snapshot(root) == before


def _run_dump(config_file) -> subprocess.CompletedProcess:
    """The REAL containerd of the pinned version (the tool cache; a missing one fails naming
    scripts/build-tools) reading a config file as the box spec has it read in the guest."""
    containerd = pinned_tools.require("containerd", "containerd")
    res = subprocess.run([str(containerd), "--config", str(config_file), "config", "dump"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return res


def _config_dump(config_file) -> str:
    """containerd's effective config; it must not have migrated any file to get there."""
    res = _run_dump(config_file)
    assert containerd_config.migration_warnings(res.stderr) == [], res.stderr
    return res.stdout


@pytest.fixture
def written_config(tmp_path, served):
    """The config.toml step 03 writes, from ubuntu-2404's real step variables."""
    env, _, _ = served
    root = make_root(tmp_path, "ubuntu-24.04")
    assert run_step("03-containerd.sh", root, **env).returncode == 0
    return root / "etc" / "containerd" / "config.toml"


def test_the_real_containerd_reads_the_pins_of_the_config_step_03_writes(written_config):
    # The box spec's effective-config check, over the real `containerd config dump` of our file.
    dump = _config_dump(written_config)
    assert expect.containerd_config_problems(dump, profiles.load("ubuntu-2404"), effective=True) == []
    # 03-containerd.sh's own check greps the same output for the pinned sandbox image.
    assert f"sandbox = '{PAUSE}'" in dump or f'sandbox = "{PAUSE}"' in dump


def test_version_4_means_what_version_3_meant_and_spares_the_migration_warning(written_config):
    """containerd 2.3.7 reads the file step 03 writes exactly as it read the same file at version 3
    (its 3 -> 4 migration touches no table k4w writes), without the warning a version 3 file (the
    planted defect) gets at every start."""
    ours = _run_dump(written_config)
    assert containerd_config.migration_warnings(ours.stderr) == []
    text = written_config.read_text()
    assert text.count("\nversion = 4\n") == 1
    written_config.write_text(text.replace("\nversion = 4\n", "\nversion = 3\n"))
    old = _run_dump(written_config)
    assert old.stdout == ours.stdout
    warnings = containerd_config.migration_warnings(old.stderr)
    assert len(warnings) == 1 and "Configuration migrated from version 3" in warnings[0]
    assert expect.containerd_config_problems(written_config.read_text(), profiles.load("ubuntu-2404")) == [
        "version is 3, not 4 (containerd 2.3 migrates an older schema at every start)"]


@pytest.mark.parametrize("plant, problem", [
    # A file containerd imports (its default /etc/containerd/conf.d/*.toml, here named) turns the
    # systemd cgroup driver off: the file we wrote still reads right, containerd does not.
    ("imports", "runc's SystemdCgroup is not true (components.containerd.cgroup_driver)"),
    # containerd 1.x's key name: containerd 2.x ignores it and falls back to its own default pause image.
    # That default is pause:3.10.2 in 2.3.7, the very image ubuntu-2404 pins, so this case pins another.
    ("sandbox_image", "pinned_images.sandbox is not registry.k8s.io/pause:3.10.1"),
    # An imported file moves the CNI plugin folder where 03-containerd.sh put none. (containerd 2.3
    # still honours the old key bin_dir, folding it into bin_dirs: no defect of the effective config.)
    ("cni_import", "the CNI dirs are not /opt/cni/bin and /etc/cni/net.d"),
    # An imported file that points the registry hosts elsewhere, past the mirrors k4w wrote.
    ("registry_import", "the registry hosts folder (registry.config_path) is not /etc/containerd/certs.d"),
])
def test_the_effective_config_check_fails_on_a_planted_defect(written_config, tmp_path, plant, problem):
    profile = profiles.load("ubuntu-2404")
    text = written_config.read_text()
    imported = {"imports": "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]\n  SystemdCgroup = false\n",
                "cni_import": "[plugins.'io.containerd.cri.v1.runtime'.cni]\n  bin_dirs = ['/usr/lib/cni']\n",
                "registry_import": "[plugins.'io.containerd.cri.v1.images'.registry]\n  config_path = '/etc/docker/certs.d'\n"}
    if plant in imported:
        override = tmp_path / "conf.d" / "override.toml"
        override.parent.mkdir()
        override.write_text("version = 4\n" + imported[plant])
        # Added to the imports 03-containerd.sh writes (its drop-in folders for the mirrors' credentials).
        text = text.replace("imports = [", f"imports = ['{override}', ", 1)
        assert expect.containerd_config_problems(text, profile) == []  # the file alone looks right
    else:
        # A pin that is not containerd's own default (internal/cri/config/config.go DefaultSandboxImage at
        # v2.3.7 is pause:3.10.2), so that losing it shows in the effective config.
        other = "registry.k8s.io/pause:3.10.1"
        kube = {**profile.data.kubernetes, "pause_image": other}
        profile = dataclasses.replace(profile, data=profiles.Attr.wrap({**profile.data, "kubernetes": kube}))
        text = text.replace(str(PAUSE), other)
        text = text.replace("[plugins.'io.containerd.cri.v1.images'.pinned_images]\n  sandbox =",
                            "[plugins.'io.containerd.cri.v1.images']\n  sandbox_image =")
    written_config.write_text(text)
    assert expect.containerd_config_problems(_config_dump(written_config), profile, effective=True) == [problem]


# `ctr plugins ls` as containerd@v2.3.7 prints it (cmd/ctr/commands/plugins/plugins.go), abridged.
PLUGINS_LS = """TYPE                                      ID                       PLATFORMS      STATUS
io.containerd.snapshotter.v1              overlayfs                linux/amd64    ok
io.containerd.cri.v1                      images                   -              ok
io.containerd.cri.v1                      runtime                  linux/amd64    ok
io.containerd.grpc.v1                     cri                      -              ok
"""


def test_the_cri_plugin_check_fails_on_a_planted_defect():
    assert expect.cri_plugin_problems(PLUGINS_LS) == []
    failed = PLUGINS_LS.replace("linux/amd64    ok\nio.containerd.grpc.v1", "linux/amd64    error\nio.containerd.grpc.v1")
    assert expect.cri_plugin_problems(failed) == ["io.containerd.cri.v1.runtime is error, not ok"]
    disabled = "\n".join(line for line in PLUGINS_LS.splitlines() if " cri " not in line)
    assert expect.cri_plugin_problems(disabled) == ["io.containerd.grpc.v1.cri is not listed, not ok"]


def test_a_tampered_containerd_tarball_installs_nothing(tmp_path, served):
    env, _, files = served
    files[env['K4W_MEDIA_URL_PATH'] + env['K4W_CONTAINERD_FILE']] += b"tampered"
    root = make_root(tmp_path, "ubuntu-24.04")
    res = run_step("03-containerd.sh", root, **env)
    assert res.returncode == 1 and "sha256 mismatch for containerd" in res.stderr
    assert not (root / "usr" / "local" / "bin").exists() and not list(root.rglob("*.part"))


@pytest.mark.parametrize("variable, value, message", [
    ("K4W_CONTAINERD_CGROUP_DRIVER", "systemd-ish", "K4W_CONTAINERD_CGROUP_DRIVER must be systemd or cgroupfs"),
    ("K4W_PAUSE_IMAGE", "pause'3", "K4W_PAUSE_IMAGE is not an image reference"),
])
def test_values_the_config_cannot_hold_are_refused_before_anything_is_written(tmp_path, served, variable, value, message):
    env, site, _ = served
    root = make_root(tmp_path, "ubuntu-24.04")
    res = run_step("03-containerd.sh", root, **{**env, variable: value})
    assert res.returncode == 1 and message in res.stderr
    assert not site.requests and not (root / "etc" / "containerd").exists()


@pytest.mark.parametrize("missing", ["K4W_CONTAINERD_FILE", "K4W_RUNC_VERSION", "K4W_PAUSE_IMAGE", "K4W_CNI_FILE"])
def test_a_missing_variable_fails_naming_it(tmp_path, served, missing):
    env, _, _ = served
    res = run_step("03-containerd.sh", make_root(tmp_path, "ubuntu-24.04"), **{k: v for k, v in env.items() if k != missing})
    assert res.returncode == 1 and f"missing {missing}" in res.stderr


def test_kubernetes_node_binaries_and_units_of_this_era_then_idempotent(tmp_path, served):
    env, site, files = served
    root = make_root(tmp_path, "ubuntu-24.04")
    res = run_step("04-kubernetes-node.sh", root, **env)
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in (root / "usr" / "local" / "bin").iterdir()) == ["kubeadm", "kubectl", "kubelet"]
    unit = (root / "etc" / "systemd" / "system" / "kubelet.service").read_text()
    assert "After=network-online.target" in unit and "ExecStart=/usr/local/bin/kubelet" in unit
    drop_in = (root / "etc" / "systemd" / "system" / "kubelet.service.d" / "10-kubeadm.conf").read_text()
    assert "ExecStart=\nExecStart=/usr/local/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS" in drop_in
    assert "--pod-infra-container-image" not in drop_in  # gone from the kubelet since 1.35: containerd pins it
    assert [r["path"] for r in site.requests] == [env['K4W_MEDIA_URL_PATH'] + env['K4W_KUBERNETES_FILE']]
    before = snapshot(root)
    res = run_step("04-kubernetes-node.sh", root, **{k: v for k, v in env.items() if k != "PACKER_HTTP_ADDR"})
    assert res.returncode == 0 and "already installed" in res.stdout and snapshot(root) == before


def test_the_node_step_refuses_a_version_other_than_the_clusters(tmp_path, served):
    env, _, _ = served
    res = run_step("04-kubernetes-node.sh", make_root(tmp_path, "ubuntu-24.04"), **{**env, "K4W_KUBE_VERSION": "1.34.0"})
    assert res.returncode == 1 and "kubeadm, kubelet and kubectl must match the cluster version" in res.stderr


def test_the_node_step_wants_a_cri_socket_url(tmp_path, served):
    env, _, _ = served
    res = run_step("04-kubernetes-node.sh", make_root(tmp_path, "ubuntu-24.04"), **{**env, "K4W_KUBE_CRI_SOCKET": "/run/containerd.sock"})
    assert res.returncode == 1 and "K4W_KUBE_CRI_SOCKET must be a unix:/// socket URL" in res.stderr


# ------------------------------------------------------------------ step 01 in this era


def test_the_build_proxy_goes_to_containerd_and_the_installers_proxy_files_go(tmp_path):
    """subiquity's proxy: key reaches the target as curtin's apt file and snapd's drop-in, both
    with the credentials; step 01 removes them, and only containerd pulls through the proxy during
    the build (a runtime drop-in in /run)."""
    from .conftest import proxy_step_env

    root = make_root(tmp_path, "ubuntu-24.04")
    curtin = root / "etc" / "apt" / "apt.conf.d" / "90curtin-aptproxy"
    snapd = root / "etc" / "systemd" / "system" / "snapd.service.d" / "snap_proxy.conf"
    for leftover in (curtin, snapd):
        leftover.parent.mkdir(parents=True)
        leftover.write_text(f"proxy {HTTP_PROXY}\n")
    env = {**proxy_step_env(HTTP_PROXY, HTTPS_PROXY), "K4W_CONTAINER_RUNTIME": "containerd"}
    res = run_step("01-proxy.sh", root, **env)
    assert res.returncode == 0, res.stderr
    assert not curtin.exists() and not snapd.exists()
    holding = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and "bob" in p.read_text())
    assert holding == ["run/k4w/proxy.env"]
    assert (root / "run" / "systemd" / "system" / "containerd.service.d" / "http-proxy.conf").is_file()
    before = snapshot(root)
    assert run_step("01-proxy.sh", root, **env).returncode == 0 and snapshot(root) == before


def test_step_01_refuses_a_runtime_it_does_not_know(tmp_path):
    from .conftest import proxy_step_env

    res = run_step("01-proxy.sh", make_root(tmp_path), **{**proxy_step_env(HTTP_PROXY), "K4W_CONTAINER_RUNTIME": "podman"})
    assert res.returncode == 1 and "K4W_CONTAINER_RUNTIME must be docker or containerd, not 'podman'" in res.stderr
