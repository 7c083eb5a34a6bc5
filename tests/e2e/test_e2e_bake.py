"""The end-to-end bake, for real: debootstrapped Debian 12 -> real squid -> cluster.yml ->
render -> `packer build` (QEMU, TCG) -> libvirt box -> fresh guest -> Ubuntu box spec over
SSH -> proxy proof -> a second provisioning run that must change nothing.

Once per box of CI_BOXES: debian-12-e2e runs the Docker era's steps (ubuntu-1604's), ubuntu-2404-e2e
the containerd era's (ubuntu-2404's), on one shared base image. ubuntu-2604-e2e (Ubuntu 26.04 itself)
is `invoke e2e --box ubuntu-2604-e2e`, not part of this suite (run.py CI_BOXES says why).

Slow (about 10 minutes for the first box with a cached base image, 5 for the second, on 2
cores): it runs in the default `pytest` invocation because CI must run it, last (see
conftest.py). A missing tool fails it, naming the install command. Output: build/e2e/ and
build/e2e-ubuntu-2404/ (box, logs, report.json); the base-image cache is build/e2e/base-image.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import yaml

from ci.e2e import BOXES, CI_BOXES, base_image, default_out, run_e2e
from ci.e2e.phases import Log, Phase
from ci.e2e.run import E2E_BOXES, E2EFailed

ROOT = Path(__file__).resolve().parents[2]
OUT = default_out(ROOT / "build", BOXES[0])
# Seconds a cache hit may take: reading a manifest and re-pointing a symlink.
REUSE_SECONDS = 5


@pytest.mark.e2e
@pytest.mark.parametrize("box", CI_BOXES)
def test_e2e_bake_in_qemu_behind_a_real_proxy_with_a_password(box, e2e_report):
    profile = yaml.safe_load((E2E_BOXES / f"{box}.yml").read_text(encoding="utf-8"))
    try:
        result = run_e2e(default_out(ROOT / "build", box), box=box, base_images=OUT / "base-image",
                         say=lambda text: print(text, flush=True))
    except E2EFailed as exc:
        e2e_report(f"bake of {box} FAILED", exc.result.summary())
        pytest.fail(f"e2e of {box} failed: {exc.result.error or 'processes left behind'} "
                    f"(timings and findings: section 'k4w e2e: bake of {box} FAILED' below; log {exc.result.log})",
                    pytrace=False)
    e2e_report(f"bake of {box}", result.summary())

    # The containerd era runs the real binaries; the seed era names its stand-ins.
    assert result.stand_ins == ([] if profile["ci_downloads"] == "real-binaries" else ["cni", "kubernetes"])
    # Every step of the box's list ran (the run fails otherwise; this says which list it was).
    assert [s["step"] for s in result.steps] == profile["provision"] and {s["status"] for s in result.steps} == {"ran"}
    # The box and its catalogue entry exist (checked against each other by the run).
    assert result.box_file.name == f"{box}-libvirt.box" and result.catalogue.name == f"{box}.json"
    # The guest's apt went through the proxy: indexes and packages.
    assert result.proxy_build["indexes"] >= 1 and result.proxy_build["debs"] >= 1
    # The box spec passed, with only the profile's deselections, each with its reason.
    spec = result.spec
    assert spec["failed"] == spec["errors"] == spec["skipped"] == 0 and spec["passed"] > 0
    # Deselected only: the kubelet (true once joined), the checks of a component this era's box
    # does not pin (containerd on a Docker box, docker on a containerd box) and what the CI profile
    # names with its reason (Hyper-V only; the seed era's kubeadm build record, which its stand-ins
    # lack); every other check runs, containerd's running daemon included.
    skips = profile.get("skip_checks") or {}
    for d in spec["deselected"]:
        # imported_images: the images a downloads.images: cache bake imports; this run pulls its own (--offline imports).
        assert (d["check"] == "kubelet" or "the profile pins no components." in d["reason"]
                or (d["check"] == "imported_images" and "this box imports no image" in d["reason"])
                or (d["check"] in skips and skips[d["check"]] in d["reason"])), d
    assert set(skips) <= {d["check"] for d in spec["deselected"]}
    assert all(d["reason"] for d in spec["deselected"])
    # The proxy demanded credentials and the bake got through; the box keeps none of it: no file
    # on its root filesystem holds the password, and the control scan shows the scan works.
    scan = result.secret_scan
    assert scan["holding"] == [] and "/etc/passwd" in scan["control"] and scan["files"] > 1000
    # Nor any journal entry (sudo logs its command line there), read through journalctl.
    assert scan["journal_matches"] == 0 and scan["journal_control"] >= 1 and scan["journal_entries"] >= 10
    # Two VMs from the box have their own SSH host keys.
    keys = result.host_keys
    assert keys["first"] and keys["second"] and keys["shared"] == []
    # The re-run changed nothing it was not expected to, and fetched nothing.
    assert any(line.startswith("differences:") and line.endswith("0 unexpected)") for line in result.idempotence)
    assert result.proxy_rerun["apt_requests"] == 0
    assert result.leftovers == []


@pytest.mark.e2e
def test_e2e_base_image_is_reused_from_the_cache(tmp_path, e2e_report):
    # After the bake this finds the image it used; run alone it builds it first (root, ~2 min).
    log = Log(tmp_path / "reuse.log", lambda text: None)
    first = base_image.ensure(OUT / "base-image", Phase("base image", 900), log)
    started = time.monotonic()
    second = base_image.ensure(OUT / "base-image", Phase("base image", 60), log)
    seconds = time.monotonic() - started
    e2e_report("base image cache", [
        f"first call: {'reused' if first.reused else 'built'} {first.folder}",
        f"second call: {'reused' if second.reused else 'BUILT AGAIN'} {second.folder} in {seconds:.2f} s",
    ])
    assert second.reused and second.folder == first.folder, f"the base image was built again: {second.folder}"
    assert seconds < REUSE_SECONDS
    assert (OUT / "base-image" / base_image.DEBIAN_12.name).resolve() == second.folder.resolve()
    assert f"base image {base_image.DEBIAN_12.name} reused: {second.folder}" in (tmp_path / "reuse.log").read_text()
