"""The containerd era's downloads, made of the REAL binaries: the pinned tools that scripts/build-tools
built from the Go module proxy (tools/lock.yml group ci, k4w.infra.pinned_tools), packed into the exact
file each profile URL names, with the inner layout of the upstream release:

  containerd-<v>-linux-amd64.tar.gz     bin/<program>   (containerd@v2.3.7 Makefile pack_release:
                                        `tar -czf releases/$(1).tar.gz -C releases/$(1) bin`)
  runc.amd64                            the program itself (no archive)
  cni-plugins-linux-amd64-v<v>.tgz      ./<plugin>      (containernetworking/plugins@v1.9.1
                                        .github/workflows/release.yaml: `tar cfzpv ... .` in bin/)
  kubernetes-node-linux-amd64.tar.gz    kubernetes/node/bin/<program>

They hold only what the cache built: containerd's tarball lacks containerd-stress, the CNI tarball its
README.md and LICENSE, the node tarball kube-proxy, kube-log-runner and kubectl-convert; no box step
or check uses those.

CI cannot download the real release files (GitHub and dl.k8s.io are unreachable), so their published
digests cannot be checked here. The digests the guest verifies are those of THESE files, measured
when they are packed and handed to the run as the user's pins (k4w-pins.yml beside the run's
cluster.yml, as `invoke pin` writes them on an air-gapped host), never written into the profile.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from k4w.infra import pinned_tools
from .archives import tar_gz
from .phases import E2EError


@dataclass(frozen=True)
class Release:
    tool: str  # the tools/lock.yml entry whose build it is
    programs: tuple[str, ...] | None  # None: every program the tool built
    member: str  # where each program sits inside the archive; "" for a lone program


# Profile component -> how its release file is made.
RELEASES = {
    "containerd": Release("containerd", ("containerd", "containerd-shim-runc-v2", "ctr"), "bin/{program}"),
    "runc": Release("runc", ("runc",), ""),
    "cni": Release("cni-plugins", None, "./{program}"),
    # The three step 04 installs (lib.sh k4w_install_node_binaries, K4W_NODE_BINARIES).
    "kubernetes": Release("kubernetes-node", ("kubeadm", "kubelet", "kubectl"), "kubernetes/node/bin/{program}"),
}


def _programs(component: str, release: Release, version: str) -> dict[str, Path]:
    """The built programs of a component, after checking the cache built the version the profile pins."""
    entry = pinned_tools.lock().get(release.tool)
    if entry is None:
        raise E2EError(f"tools/lock.yml has no {release.tool}: the CI box's {component} cannot be made of real binaries")
    if entry["version"].removeprefix("v") != version.removeprefix("v"):
        raise E2EError(f"tools/lock.yml builds {release.tool} {entry['version']}, but the CI profile pins {component} "
                       f"{version}: the box would not get the version its profile names")
    names = release.programs
    if names is None:
        pinned_tools.require(release.tool, _any_program(release.tool))
        names = tuple(sorted(p.name for p in (pinned_tools.tool_dir(release.tool) / "bin").iterdir() if p.is_file()))
    return {name: pinned_tools.require(release.tool, name) for name in names}


def _any_program(tool: str) -> str:
    """Some program of a tool that builds many (the CNI plugins), to ask whether it is built at all."""
    folder = pinned_tools.tool_dir(tool) / "bin"
    found = sorted(p.name for p in folder.iterdir() if p.is_file()) if folder.is_dir() else []
    return found[0] if found else "bin/*"


def release_file(component: str, version: str) -> bytes:
    """The bytes of one component's release file, from the tool cache."""
    release = RELEASES[component]
    programs = _programs(component, release, version)
    if not release.member:
        [path] = programs.values()
        return path.read_bytes()
    return tar_gz({release.member.format(program=name): path.read_bytes() for name, path in programs.items()})


@dataclass(frozen=True)
class Packed:
    url: str
    body: bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.body).hexdigest()


def for_profile(components: dict) -> dict[str, Packed]:
    """{component: Packed} for every downloaded component of the profile. A component without a
    real build is an error: this era's CI box has no stand-in to fall back to."""
    unknown = sorted(name for name, spec in components.items() if spec.get("url") and name not in RELEASES)
    if unknown:
        raise E2EError(f"no real build for components {', '.join(unknown)} (ci/e2e/release_files.py RELEASES)")
    return {name: Packed(str(spec["url"]), release_file(name, str(spec["version"])))
            for name, spec in components.items() if spec.get("url")}


def pins(box: str, packed: dict[str, Packed], when: str) -> dict:
    """The k4w-pins.yml document (k4w.model.pins) that hands the packed files' digests to the run."""
    return {box: {name: {"url": p.url, "sha256": p.sha256, "size": len(p.body), "pinned": when}
                  for name, p in packed.items()}}
