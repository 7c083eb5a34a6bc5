"""Nothing rendered for a cgroup-v2-only box assumes the v1 hierarchy.

Ubuntu 26.04's systemd boots with the unified (v2) hierarchy only; a kernel argument asking for the
v1 layout no longer brings it back. A box profile that says so (cgroup_v2_only: true) is held here:
- every container runtime's cgroup_driver is systemd: on a v2 host systemd owns the cgroup tree, and
  the kubelet's driver must equal the runtime's (the kubelet takes kubeadm's default, systemd, or the
  rendered cgroupDriver, checked below);
- no Docker older than 20.10, the first release with cgroup v2 support (moby 20.10 release notes);
- no rendered file for the box, and no Ubuntu guest script, asks for the v1 layout
  (systemd.unified_cgroup_hierarchy=0 and its companions);
- the rendered kubeadm config (the KubeletConfiguration every Linux node gets) names no cgroupDriver
  other than systemd.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from pathlib import Path

import yaml

from k4w.derive.cluster import Cluster
from k4w.validate.result import Result
from k4w.validate.result import from_check

# Ways to ask systemd or the kernel for the v1 hierarchy (systemd's kernel-command-line options and
# its environment override); none has an effect on 26.04, so any of them is a v1 assumption.
V1_MARKERS = ("systemd.unified_cgroup_hierarchy=0", "systemd.unified_cgroup_hierarchy=false",
              "systemd.legacy_systemd_cgroup_controller", "SYSTEMD_CGROUP_ENABLE_LEGACY_FORCE")
DOCKER_WITH_CGROUP_V2 = (20, 10)


def _version(text: str) -> tuple[int, int]:
    """(major, minor) of a version string such as 17.03.2 or 20.10.0-ce; missing parts are 0."""
    major, minor = ([int(n) for n in re.findall(r"\d+", str(text))[:2]] + [0, 0])[:2]
    return major, minor


def _profile_problems(where: str, data) -> list[str]:
    problems = []
    for name, component in sorted((data.get("components") or {}).items()):
        driver = component.get("cgroup_driver")
        if driver is not None and driver != "systemd":
            problems.append(f"{where}: components.{name}.cgroup_driver is {driver}, but this box is cgroup v2 only "
                            f"(cgroup_v2_only): use systemd, which owns the cgroup tree there")
    docker = (data.get("components") or {}).get("docker")
    if docker and _version(docker.get("version", "0")) < DOCKER_WITH_CGROUP_V2:
        problems.append(f"{where}: components.docker {docker.get('version')} predates cgroup v2 support (Docker 20.10), "
                        f"and this box is cgroup v2 only")
    return problems


def _marker_problems(paths: list[Path], what: str) -> list[str]:
    problems = []
    for path in paths:
        text = path.read_text(encoding="utf-8", errors="replace")
        problems += [f"{path}: asks for the cgroup v1 hierarchy ({marker}) {what}" for marker in V1_MARKERS if marker in text]
    return problems


def _kubeadm_driver_problems(out: Path) -> list[str]:
    config = out / "kubeadm" / "kubeadm-config.yaml"
    if not config.is_file():
        return []
    for doc in yaml.safe_load_all(config.read_text(encoding="utf-8")):
        if isinstance(doc, dict) and doc.get("kind") == "KubeletConfiguration":
            driver = doc.get("cgroupDriver")
            if driver not in (None, "systemd"):
                return [f"{config}: KubeletConfiguration.cgroupDriver is {driver}; a cgroup-v2-only node needs systemd"]
    return []


def check(cluster: Cluster, out: Path) -> tuple[list[str], list[str]]:
    """(box profiles checked, problems) for the boxes that declare cgroup_v2_only."""
    checked, problems = [], []
    boxes = [p for p in cluster.profiles.values() if p.data.get("cgroup_v2_only")]
    for profile in boxes:
        checked.append(profile.path.name)
        problems += _profile_problems(profile.path.name, profile.data)
        rendered = sorted(p for p in (out / "http" / profile.name).rglob("*") if p.is_file() and p.parent.name != "components")
        problems += _marker_problems(rendered, f"in a file rendered for {profile.name}, which is cgroup v2 only")
    if boxes:
        scripts = sorted((cluster.sources.guest / "ubuntu").rglob("*.sh"))
        problems += _marker_problems(scripts, "in a guest script that cgroup-v2-only boxes run")
        problems += _kubeadm_driver_problems(out)
    return checked, problems


# ------------------------------------------------------------------ the validator (k4w.validate.VALIDATORS)


def run(cluster: Cluster, out: Path) -> Result:
    return from_check("cgroup v2 only boxes", "runtime cgroup drivers and rendered files against the unified hierarchy", check(cluster, out))


def would_run(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    return ["# in this process: each cgroup_v2_only box's cgroup drivers, its rendered files, the Ubuntu guest "
            f"scripts and {out / 'kubeadm' / 'kubeadm-config.yaml'} against the v2-only hierarchy"]
