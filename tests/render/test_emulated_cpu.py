"""A master on QEMU's emulated CPU (host.provider libvirt, libvirt.accelerator tcg) gets a control plane that
survives it from `kubeadm init` on: the leader-election leases as controllerManager/scheduler extraArgs and
kube-apiserver's and etcd's liveness tolerance as kubeadm patches (k4w/derive/control_plane.py). Every
other host (Hyper-V, libvirt with KVM) renders the kubeadm artifacts exactly as before."""

from __future__ import annotations

import difflib

import pytest
import yaml

from k4w.derive import control_plane
from k4w.infra import sources
from k4w.infra.errors import K4wError
from k4w.model import config as config_mod
from tests.cluster.conftest import render_to
from tests.helpers import MODERN_BOXES, config_dict, modern_config


def on_host(data: dict, provider: str, accelerator: str | None = None) -> dict:
    """data for another host: libvirt drops the hyperv block (config_rules refuses the other provider's keys)."""
    data = dict(data)
    if provider == "libvirt":
        data.pop("hyperv", None)
        data["host"] = {"provider": "libvirt"}
        data["libvirt"] = {"accelerator": accelerator}
    return data


def kubeadm_tree(out) -> dict[str, bytes]:
    folder = out / "kubeadm"
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def documents(out) -> dict[str, dict]:
    text = (out / "kubeadm" / "kubeadm-config.yaml").read_text()
    return {d["kind"]: d for d in yaml.safe_load_all(text) if d}


@pytest.fixture
def modern(monkeypatch):
    monkeypatch.setenv(sources.BOX_DIRS_ENV, str(MODERN_BOXES))
    return modern_config()


def test_a_tcg_master_gets_the_leases_ecdsa_keys_and_the_probe_patches_in_its_kubeadm_config(tmp_path, modern):
    out = tmp_path / "build"
    cluster = render_to(out, on_host(modern, "libvirt", "tcg"))
    assert cluster.emulated_cpu
    docs = documents(out)
    assert docs["InitConfiguration"]["patches"] == {"directory": "/tmp/k4w/kubeadm-patches"}
    leases = [{"name": "leader-elect-lease-duration", "value": "180s"},
              {"name": "leader-elect-renew-deadline", "value": "120s"},
              {"name": "leader-elect-retry-period", "value": "20s"}]
    assert docs["ClusterConfiguration"]["controllerManager"] == {"extraArgs": leases}
    assert docs["ClusterConfiguration"]["scheduler"] == {"extraArgs": leases}
    assert docs["ClusterConfiguration"]["encryptionAlgorithm"] == "ECDSA-P256"
    assert "apiServer" not in docs["ClusterConfiguration"] and "etcd" not in docs["ClusterConfiguration"]
    patches = sorted((out / "kubeadm" / "patches").iterdir())
    assert [p.name for p in patches] == ["etcd+strategic.yaml", "kube-apiserver+strategic.yaml"]
    for path in patches:
        target = path.name.split("+")[0]
        assert yaml.safe_load(path.read_text()) == {
            "spec": {"containers": [{"name": target, "livenessProbe": {"failureThreshold": 30},
                                     "readinessProbe": {"periodSeconds": 10}}]}}


# The seed era's boxes bake for Hyper-V alone (build.providers), so only the containerd era has a libvirt render.
@pytest.mark.parametrize("era", ["modern"])
def test_hyperv_and_kvm_render_the_same_kubeadm_files_as_before(tmp_path, monkeypatch, era):
    """libvirt with KVM and Hyper-V: one kubeadm-config.yaml, byte for byte the same, no patches, no extraArgs."""
    if era == "modern":
        monkeypatch.setenv(sources.BOX_DIRS_ENV, str(MODERN_BOXES))
    data = modern_config() if era == "modern" else config_dict()
    render_to(tmp_path / "hyperv", data)
    kvm = render_to(tmp_path / "kvm", on_host(data, "libvirt", "kvm"))
    assert not kvm.emulated_cpu and kvm.control_plane is None
    hyperv_files = kubeadm_tree(tmp_path / "hyperv")
    assert list(hyperv_files) == ["kubeadm-config.yaml"]
    assert kubeadm_tree(tmp_path / "kvm") == hyperv_files
    text = hyperv_files["kubeadm-config.yaml"].decode()
    assert "patches" not in text and "controllerManager" not in text and "leader-elect" not in text


def test_tcg_only_adds_the_patches_folder_and_the_extra_args(tmp_path, modern):
    """The tcg config is the Hyper-V one plus inserted lines, nothing changed or removed: the rest of the
    master's configuration means the same on every host."""
    render_to(tmp_path / "hyperv", modern)
    render_to(tmp_path / "tcg", on_host(modern, "libvirt", "tcg"))
    before = (tmp_path / "hyperv" / "kubeadm" / "kubeadm-config.yaml").read_text().splitlines(keepends=True)
    after = (tmp_path / "tcg" / "kubeadm" / "kubeadm-config.yaml").read_text().splitlines(keepends=True)
    # One value changes: the first API answer waits as long as cluster-up (k4w/model/kubeadm_timeouts.py).
    ready = max(600, config_mod.parse(yaml.safe_dump(modern), "test.yml").cluster.ready_timeout)
    wait = [i for i, line in enumerate(after) if '"kubernetesAPICall"' in line]
    assert [after[i] for i in wait] == [f'  "kubernetesAPICall": "{ready}s"\n']
    after[wait[0]] = '  "kubernetesAPICall": "600s"\n'
    opcodes = difflib.SequenceMatcher(a=before, b=after, autojunk=False).get_opcodes()
    assert {op for op, *_ in opcodes} == {"equal", "insert"}
    inserted = [line for op, _, _, j1, j2 in opcodes if op == "insert" for line in after[j1:j2]]
    keys = [line.rstrip() for line in inserted if not line.lstrip().startswith("#")]
    assert keys[:2] == ["patches:", '  directory: "/tmp/k4w/kubeadm-patches"']
    assert keys[2:4] == ['encryptionAlgorithm: "ECDSA-P256"', "controllerManager:"] and "scheduler:" in keys


def test_a_seed_era_master_on_an_emulated_cpu_is_refused_naming_why(tmp_path, modern):
    """A seed-era box cannot be on libvirt at all (build.providers, refused when cluster.yml is read); the
    render's own refusal stays for any v1alpha2 master that reaches it, so both are held here."""
    with pytest.raises(K4wError) as caught:
        render_to(tmp_path / "build", on_host(config_dict(), "libvirt", "tcg"))
    assert "nodes[0].box: ubuntu-1604 bakes only for hyperv" in str(caught.value)
    assert not (tmp_path / "build").exists()
    with pytest.raises(K4wError) as caught:
        control_plane.scaling(config_mod.parse(yaml.safe_dump(on_host(modern, "libvirt", "tcg")), "test.yml"),
                              "kubeadm.k8s.io/v1alpha2")
    assert str(caught.value) == (
        "libvirt.accelerator tcg: the master's box speaks kubeadm API kubeadm.k8s.io/v1alpha2, but the control plane of "
        "an emulated CPU is scaled (leader-election leases, liveness of kube-apiserver and etcd) only through "
        "kubeadm.k8s.io/v1beta4 (Kubernetes 1.31+): use a containerd-era master box, or libvirt.accelerator kvm")


def test_every_patch_template_is_named_as_kubeadm_reads_a_patch_file():
    """kubeadm ignores a misnamed patch file with a log line only (patches.go parseFilename)."""
    templates = sorted((sources.REPO.templates / "kubeadm" / "patches").glob("*.j2"))
    assert templates
    targets = set()
    for template in templates:
        match = control_plane.PATCH_NAME.match(template.stem)
        assert match, template.name
        targets.add(match["target"])
    assert targets == set(control_plane.LIVENESS_TOLERANT)
