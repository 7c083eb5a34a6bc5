"""Every versioned fact table in k4w/validate/facts is for a version some profile pins, or is kept as the
evidence a named file cites. A table left behind when a pin moves (flanneld-0.28.9 after Flannel 0.28.10,
kube-proxy and kubeadm 1.35 after Kubernetes 1.37) checks nothing and reads as if it did."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
FACTS = ROOT / "k4w" / "validate" / "facts"
PROFILES = sorted((ROOT / "boxes").glob("*.yml")) + sorted((ROOT / "ci" / "e2e" / "boxes").glob("*.yml"))
# <binary>-<version>[-<aspect>].yml; the others (kubeadm-config-v1beta4.yml, windows-images.yml, ...)
# are keyed by an API version or hold facts of every version.
VERSIONED = re.compile(r"(?P<binary>[a-z][a-z-]*?)-(?P<version>\d+\.\d+(?:\.\d+)?)(?:-[a-z-]+)?\.yml")
# Tables no profile pins, kept because a file of the repository cites them as evidence.
EVIDENCE = {
    "flanneld-0.12.0.yml": ("templates/nodes/windows/flanneld.args.j2", "v0.12.0"),   # --net-config-path came in 0.12.0
    "flanneld-0.13.0.yml": ("templates/nodes/windows/kube-proxy.args.j2", "v0.13.0"),  # the fix the seed era lacks
    "kubelet-1.35.yml": ("boxes/ubuntu-1604.yml", "facts/kubelet-1.35.yml"),          # a flag gone by 1.35
}


def pinned() -> set[tuple[str, str]]:
    """(binary, version) of every table a profile needs: full versions and major.minor."""
    found: set[tuple[str, str]] = set()
    for path in PROFILES:
        profile = yaml.safe_load(path.read_text(encoding="utf-8"))
        kube = str((profile.get("kubernetes") or {}).get("version") or "")
        minor = ".".join(kube.split(".")[:2])
        for binary in ("kubelet", "kube-proxy", "kubeadm"):
            found |= {(binary, kube), (binary, minor)}
        components = profile.get("components") or {}
        for binary, component in (("flanneld", "flannel"), ("containerd", "containerd"), ("crictl", "crictl")):
            version = str((components.get(component) or {}).get("version") or "")
            found.add((binary, version))
    return found


def test_every_versioned_fact_table_is_pinned_or_cited():
    pins = pinned()
    idle = []
    for table in sorted(FACTS.glob("*.yml")):
        match = VERSIONED.fullmatch(table.name)
        if not match or (match["binary"], match["version"]) in pins:
            continue
        if table.name in EVIDENCE:
            citing, words = EVIDENCE[table.name]
            assert words in (ROOT / citing).read_text(encoding="utf-8"), f"{citing} no longer cites {table.name}"
            continue
        idle.append(table.name)
    assert not idle, f"fact tables for versions no profile pins (delete them, or name who cites them): {idle}"


def test_the_rule_sees_a_table_left_behind(tmp_path):
    assert VERSIONED.fullmatch("flanneld-0.28.9.yml")["version"] == "0.28.9"
    assert ("flanneld", "0.28.9") not in pinned() and ("flanneld", "0.28.10") in pinned()
    assert ("kube-proxy", "1.35") not in pinned() and ("kube-proxy", "1.37") in pinned()
    assert VERSIONED.fullmatch("containerd-2.3.7-hosts.yml")["version"] == "2.3.7"
    assert VERSIONED.fullmatch("kubeadm-1.11-windows-preflight.yml")["binary"] == "kubeadm"
    assert VERSIONED.fullmatch("kubeadm-config-v1beta4.yml") is None
