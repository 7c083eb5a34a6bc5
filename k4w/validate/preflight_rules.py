"""kubeadm's Windows SystemVerification preflight, held against each Windows box of that kubeadm.

cluster-join.ps1 runs kubeadm 1.11's join with no --ignore-preflight-errors, so the box's Windows
build and Docker version must pass the check as kubeadm 1.11 runs it. The check's spec and logic are
vendored as facts/kubeadm-<minor>-windows-preflight.yml (read at the tag; the file names its
source); this module applies them the way the Go code does. A box whose kubeadm has no such facts
file runs a preflight k4w has not read, which is refused rather than assumed to pass.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from pathlib import Path

import yaml

from k4w.derive.cluster import Cluster
from k4w.model.profiles import Profile
from k4w.validate.result import Result
from k4w.validate.result import from_check

FACTS = Path(__file__).resolve().parent / "facts"


def facts_path(kubernetes_version: str) -> Path:
    minor = ".".join(kubernetes_version.split(".")[:2])
    return FACTS / f"kubeadm-{minor}-windows-preflight.yml"


def kernel_release(os_build: int | str) -> str:
    """What (Get-CimInstance Win32_OperatingSystem).Version reports on Windows 10/Server 2016+."""
    return f"10.0.{os_build}"


def check_box(profile: Profile, facts: dict) -> list[str]:
    """Problems of one Windows box against kubeadm's SystemVerification (empty = passes)."""
    where = profile.path.name
    problems = []
    release = kernel_release(profile.data.guest.os_build)
    # Go's regexp.MatchString is a search, not a full match.
    if not any(re.search(pattern, release) for pattern in facts["kernel_versions"]):
        problems.append(f"{where}: kernel release {release} matches none of kubeadm's KernelSpec versions "
                        f"{facts['kernel_versions']}: SystemVerification would fail")
    docker = ((profile.data.get("components") or {}).get("docker") or {}).get("version")
    if docker is None:
        return problems
    if any(re.search(pattern, docker) for pattern in facts["docker_versions"]):
        # The graph driver is then checked: Docker on Windows uses windowsfilter, the only one it has.
        if "windowsfilter" not in facts["docker_graph_drivers"]:
            problems.append(f"{where}: kubeadm's DockerSpec wants graph drivers {facts['docker_graph_drivers']}")
    elif not re.search(facts["docker_newer_scheme"], docker):
        problems.append(f"{where}: Docker {docker} matches neither kubeadm's validated versions {facts['docker_versions']} "
                        f"nor its newer-version scheme: SystemVerification would fail")
    return problems


def check(cluster: Cluster) -> tuple[list[str], list[str]]:
    """(boxes checked, problems) for every Windows box of the seed recipe (the containerd recipe's
    kubeadm gets a JoinConfiguration with the containerd socket: no Docker validator, and its
    kernel spec accepts every Server 2019+ build; its facts are not vendored)."""
    checked, problems = [], []
    for profile in cluster.profiles.values():
        if not profile.is_windows or profile.node_recipe:
            continue
        checked.append(profile.path.name)
        path = facts_path(profile.kubernetes_version)
        if not path.is_file():
            problems.append(f"{profile.path.name}: no facts for kubeadm {profile.kubernetes_version}'s Windows preflight "
                            f"({path.name}): read its SystemVerification spec at the tag before joining without skipping it")
            continue
        problems += check_box(profile, yaml.safe_load(path.read_text(encoding="utf-8")))
    return checked, problems


# ------------------------------------------------------------------ the validator (k4w.validate.VALIDATORS)


def run(cluster: Cluster, out: Path) -> Result:
    return from_check("kubeadm Windows preflight", "kubeadm's SystemVerification spec at the tag", check(cluster))


def would_run(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    return ["# in this process: each seed-recipe Windows box's build and Docker version against "
            "k4w/validate/facts/kubeadm-<minor>-windows-preflight.yml"]
