"""An emulated CPU's kubeadm config (libvirt.accelerator tcg), as `invoke validate` holds it:
- in process (k4w.validate.kubeadm_config_rules.patch_problems): every patch file named as kubeadm reads one
  (kubeadm IGNORES a misnamed file), the patches folder named exactly when the CPU is emulated, the
  leader-election extraArgs present;
- by the REAL pinned kubeadm (k4w.validate.kubeadm_real): `kubeadm config validate` and `kubeadm init --dry-run`
  with the rendered patches, and the static Pod manifests kubeadm writes carry the scaled values."""

from __future__ import annotations

from pathlib import Path

import pytest

from k4w.derive import control_plane
from k4w.infra import sources
from k4w.validate import kubeadm_config_rules, kubeadm_real
from tests.cluster.conftest import render_to
from tests.helpers import MODERN_BOXES, modern_config
from tests.render.test_emulated_cpu import on_host

CONFIG = "kubeadm/kubeadm-config.yaml"


@pytest.fixture
def tcg(tmp_path, monkeypatch):
    monkeypatch.setenv(sources.BOX_DIRS_ENV, str(MODERN_BOXES))
    out = tmp_path / "build"
    return render_to(out, on_host(modern_config(), "libvirt", "tcg")), out


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def test_the_rendered_tcg_config_passes_the_rules(tcg):
    cluster, out = tcg
    assert kubeadm_config_rules.run(cluster, out).problems == []


def test_a_patch_file_kubeadm_would_ignore_is_named(tcg):
    cluster, out = tcg
    patches = out / control_plane.PATCHES_OUT_DIR
    (patches / "etcd+strategic.yaml").rename(patches / "etcd+strategic.yml")
    problems = kubeadm_config_rules.patch_problems(cluster, out)
    assert problems[0].startswith(f"{patches / 'etcd+strategic.yml'}: kubeadm ignores a patch file of this name, so its "
                                  "setting would be lost: name it target[suffix][+patchtype].extension")
    assert problems[1:] == [f"{patches}: no patch for etcd: its livenessProbe keeps kubeadm's failureThreshold 8 on an "
                            "emulated CPU"]


def test_a_tcg_config_without_the_patches_folder_or_a_lease_is_refused(tcg):
    cluster, out = tcg
    _edit(out / CONFIG, 'patches:\n  directory: "/tmp/k4w/kubeadm-patches"\n', "")
    _edit(out / CONFIG, '    - name: "leader-elect-retry-period"\n      value: "20s"\nscheduler:', "scheduler:")
    assert kubeadm_config_rules.patch_problems(cluster, out) == [
        f"{out / CONFIG}: InitConfiguration.patches.directory is None, expected '/tmp/k4w/kubeadm-patches' (the folder "
        "cluster-up uploads OUT/kubeadm/patches/ to, for libvirt.accelerator tcg)",
        f"{out / CONFIG}: ClusterConfiguration.controllerManager.extraArgs lacks leader-elect-retry-period=20s (an emulated "
        "CPU's leader-election lease, k4w/derive/control_plane.py)"]


def test_a_real_cpu_with_a_patches_folder_is_refused(tmp_path, monkeypatch):
    """No folder but the one cluster-up uploads is on the master, and only for tcg: `kubeadm init` would fail."""
    monkeypatch.setenv(sources.BOX_DIRS_ENV, str(MODERN_BOXES))
    out = tmp_path / "build"
    cluster = render_to(out, modern_config())
    assert kubeadm_config_rules.patch_problems(cluster, out) == []
    _edit(out / CONFIG, "timeouts:\n", "patches:\n  directory: /etc/kubeadm-patches\ntimeouts:\n")
    (out / control_plane.PATCHES_OUT_DIR).mkdir()
    (out / control_plane.PATCHES_OUT_DIR / "etcd.yaml").write_text("spec: {}\n")
    assert kubeadm_config_rules.patch_problems(cluster, out) == [
        f"{out / CONFIG}: InitConfiguration.patches.directory is '/etc/kubeadm-patches', expected None (only an emulated "
        "CPU's master gets patches; no other folder is on the master)",
        f"{out / control_plane.PATCHES_OUT_DIR}: patches rendered for a master whose CPU is not emulated (1 files)"]


# ------------------------------------------------------------------ the real kubeadm 1.37.2


@pytest.mark.tools
def test_the_real_kubeadm_applies_the_rendered_patches_and_extra_args(tcg):
    cluster, out = tcg
    outcome = kubeadm_real.check(cluster, out)
    assert outcome.problems == []
    assert (f"{CONFIG}: kubeadm applied kubeadm/patches/ and the extraArgs (emulated CPU): kube-apiserver, etcd "
            "livenessProbe failureThreshold 30, readinessProbe periodSeconds 10; ECDSA-P256 keys; kube-controller-manager, kube-scheduler --leader-elect-lease-duration=180s "
            "--leader-elect-renew-deadline=120s --leader-elect-retry-period=20s") in outcome.notes


@pytest.mark.tools
def test_the_real_kubeadm_shows_a_patch_it_ignored_and_a_lease_left_out(tcg):
    """A misnamed patch file passes `kubeadm config validate` and the dry run (kubeadm only logs that it ignored
    it): the manifests kubeadm wrote show what was lost."""
    cluster, out = tcg
    patches = out / control_plane.PATCHES_OUT_DIR
    (patches / "kube-apiserver+strategic.yaml").rename(patches / "kube-apiserver+strategic.yml")
    _edit(out / CONFIG, 'scheduler:\n  extraArgs:\n    - name: "leader-elect-lease-duration"\n      value: "180s"\n',
          'scheduler:\n  extraArgs:\n')
    _edit(out / CONFIG, 'encryptionAlgorithm: "ECDSA-P256"\n', '')
    outcome = kubeadm_real.check(cluster, out)
    assert outcome.problems == [
        *(f"{CONFIG}: kubeadm's {key} is not an ECDSA-P256 key (-----BEGIN RSA PRIVATE KEY-----): "
          "ClusterConfiguration.encryptionAlgorithm did not take effect" for key in ("ca.key", "apiserver.key", "etcd/server.key")),
        f"{CONFIG}: kubeadm's kube-scheduler manifest lacks --leader-elect-lease-duration=180s (ClusterConfiguration extraArgs)",
        f"{CONFIG}: kubeadm's kube-apiserver manifest has livenessProbe failureThreshold 8, not 30: kubeadm did not apply "
        "kubeadm/patches/ (a misnamed file is ignored)",
        f"{CONFIG}: kubeadm's kube-apiserver manifest has readinessProbe periodSeconds 1, not 10: kubeadm did not apply "
        "kubeadm/patches/"]


@pytest.mark.tools
def test_the_real_kubeadm_never_reads_the_masters_folder_on_this_host(tcg):
    """The config names the master's folder; the check hands kubeadm the rendered one, and refuses a config that
    does not name the master's folder as rendered rather than check something else."""
    cluster, out = tcg
    config = next(c for c in kubeadm_real.configs(cluster, out) if c.init)
    local = kubeadm_real.local_patches(config)
    assert f'  directory: "{(out / control_plane.PATCHES_OUT_DIR).resolve()}"\n' in local
    assert control_plane.PATCHES_GUEST_DIR not in local
    _edit(out / CONFIG, '  directory: "/tmp/k4w/kubeadm-patches"\n', '  directory: "/tmp/k4w/other"\n')
    assert kubeadm_real.check(cluster, out).problems == [
        f'{CONFIG}: does not name kubeadm\'s patches folder as `directory: "/tmp/k4w/kubeadm-patches"` once '
        "(libvirt.accelerator tcg)"]

