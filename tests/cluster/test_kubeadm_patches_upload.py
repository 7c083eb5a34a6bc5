"""cluster-up's master init hands kubeadm the patches an emulated CPU's kubeadm config names (k4w.derive.control_plane):
uploaded beside the config, into the folder the config names, emptied first, before cluster-init.sh runs
`kubeadm init`. A master on a real CPU gets no such folder."""

from __future__ import annotations

import pytest

from k4w.cluster import steps as S
from k4w.cluster import up as up_mod
from k4w.derive import control_plane
from k4w.infra import sources
from k4w.infra.errors import K4wError
from tests.cluster.conftest import machines_of, render_to
from tests.fakes.cluster_world import FakeClock, FakeWorld
from tests.helpers import MODERN_BOXES, modern_config
from tests.render.test_emulated_cpu import on_host


def _master_init(tmp_path, monkeypatch, data: dict) -> tuple[FakeWorld, object]:
    monkeypatch.setenv(sources.BOX_DIRS_ENV, str(MODERN_BOXES))
    out = tmp_path / "build"
    cluster = render_to(out, data)
    world = FakeWorld(machines_of(out))
    ctx = up_mod.make_context(cluster, out, dry_run=False, vagrant=world.vagrant, remote=world.remote,
                              host=world.host, clock=FakeClock())
    return world, ctx


def test_the_patches_folder_is_under_the_upload_folder_of_linux_guests():
    """The config and its patches travel together; the folder is private like every upload there."""
    assert control_plane.PATCHES_GUEST_DIR.startswith(S.LINUX_DIR + "/")


def test_a_tcg_master_gets_the_rendered_patches_before_kubeadm_init(tmp_path, monkeypatch):
    world, ctx = _master_init(tmp_path, monkeypatch, on_host(modern_config(), "libvirt", "tcg"))
    S.step_master_init(ctx)
    log = world.log
    empty = log.index("master: rm -rf /tmp/k4w/kubeadm-patches && install -d -m 0700 /tmp/k4w/kubeadm-patches")
    uploads = [i for i, line in enumerate(log) if line.startswith("master: upload ") and "/kubeadm-patches/" in line]
    init = next(i for i, line in enumerate(log) if "cluster-init.sh" in line and "K4W_KUBEADM_CONFIG" in line)
    assert [log[i] for i in uploads] == [
        "master: upload etcd+strategic.yaml /tmp/k4w/kubeadm-patches/etcd+strategic.yaml",
        "master: upload kube-apiserver+strategic.yaml /tmp/k4w/kubeadm-patches/kube-apiserver+strategic.yaml"]
    assert empty < min(uploads) and max(uploads) < init
    rendered = ctx.out / control_plane.PATCHES_OUT_DIR / "etcd+strategic.yaml"
    assert world.uploaded["/tmp/k4w/kubeadm-patches/etcd+strategic.yaml"][0] == rendered.read_text()


def test_a_real_cpu_master_gets_no_patches_folder(tmp_path, monkeypatch):
    world, ctx = _master_init(tmp_path, monkeypatch, on_host(modern_config(), "libvirt", "kvm"))
    S.step_master_init(ctx)
    assert not [line for line in world.log if "kubeadm-patches" in line]


def test_a_tcg_master_without_rendered_patches_is_stopped_before_kubeadm(tmp_path, monkeypatch):
    world, ctx = _master_init(tmp_path, monkeypatch, on_host(modern_config(), "libvirt", "tcg"))
    for path in (ctx.out / control_plane.PATCHES_OUT_DIR).iterdir():
        path.unlink()
    with pytest.raises(K4wError, match=r"kubeadm/patches has no rendered patches \(libvirt.accelerator tcg\): run `invoke render`"):
        S.step_master_init(ctx)
    assert not [line for line in world.log if "cluster-init.sh" in line]
