"""CI STAND-INS of the SEED era (debian-12-e2e: Kubernetes 1.11, CNI plugins 0.6.0, Docker), in the
layout of the real files.

Kubernetes 1.11 and CNI plugins 0.6.0 cannot be built with current Go, and CI's network reaches only
the package registries (not dl.k8s.io or GitHub). So for this era the end-to-end run serves files
with the same names and the same inner layout, whose programs are small shell scripts that answer
the version queries the box step and the box spec make with the pinned version. They are NOT
Kubernetes or CNI: nothing in them can run a node. docs/verification.md and the run's report.json
(`stand_ins: [...]`) name them as stand-ins. The containerd era has none: its CI box gets the real
binaries built from the Go module proxy (release_files.py).

They are byte-for-byte reproducible (archives.tar_gz), so ci/e2e/boxes/debian-12-e2e.yml pins
their sha512/sha256 like any profile, and the real step 04 installs them from the host cache through
the real fetch and build-media path. A test (tests/e2e/test_e2e_parts.py) checks the pins against
what these functions build.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from . import cluster_images, oci_archive
from .archives import tar_gz
from .cluster_images import Built

# What the box steps (guest/ubuntu/bake/04-kubernetes.sh, 04-kubernetes-node.sh) and the box spec
# ask each binary, and the answer the real binary gives (kubectl's --client without --short prints
# version.Info before 1.28, abridged here to the fields a reader of the version uses; from 1.28 on,
# where --short is gone, its first line is "Client Version: v<version>").
_NODE_ANSWERS = {
    "kubeadm": {"version -o short": "v{v}"},
    "kubelet": {"--version": "Kubernetes v{v}"},
    "kubectl": {"version --client --short": "Client Version: v{v}",
                "version --client": 'Client Version: version.Info{{Major:"1", GitVersion:"v{v}"}}'},
    "kube-proxy": {"--version": "Kubernetes v{v}"},
}
_KUBECTL_PLAIN_CLIENT_VERSION = (1, 28)
# The plugins kubeadm's kubelet expects in /opt/cni/bin (cni-plugins-amd64-v0.6.0.tgz holds these
# and more; the stand-in keeps the ones the box spec looks for). containernetworking/plugins
# dropped flannel in v1.0.0 (k4w.verify.expect.CNI_WITHOUT_FLANNEL).
CNI_PLUGINS = ("bridge", "flannel", "host-local", "loopback", "portmap")


def _script(name: str, answers: dict[str, str]) -> bytes:
    cases = "".join(f'    "{query}") echo "{answer}" ;;\n' for query, answer in answers.items())
    return (f"#!/bin/sh\n# k4w CI STAND-IN for {name} (ci/e2e/seed_stand_ins.py): not the real program.\n"
            f'case "$*" in\n{cases}'
            f'    *) echo "k4w CI stand-in for {name}: cannot run \'$*\'" >&2; exit 3 ;;\nesac\n').encode()


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".")[:3])


def node_tarball(version: str) -> bytes:
    """kubernetes-node-linux-amd64.tar.gz's layout: kubernetes/node/bin/<binary>."""
    answers = {name: dict(queries) for name, queries in _NODE_ANSWERS.items()}
    if _release(version)[:2] >= _KUBECTL_PLAIN_CLIENT_VERSION:
        del answers["kubectl"]["version --client --short"]  # gone from kubectl 1.28 on
        answers["kubectl"]["version --client"] = "Client Version: v{v}"
    return tar_gz({f"kubernetes/node/bin/{name}": _script(name, {q: a.format(v=version) for q, a in queries.items()})
                    for name, queries in answers.items()}, level=9)


def cni_tarball(version: str) -> bytes:
    """cni-plugins-amd64-v<version>.tgz's layout: the plugins at the top level."""
    plugins = [name for name in CNI_PLUGINS if name != "flannel" or _release(version) < (1, 0, 0)]
    return tar_gz({f"./{name}": _script(f"CNI plugin {name} v{version}", {}) for name in plugins}, level=9)


def for_profile(components: dict) -> dict[str, bytes]:
    """{url: bytes} for the profile's components that have a stand-in."""
    builders = {"kubernetes": node_tarball, "cni": cni_tarball}
    return {str(spec["url"]): builders[name](str(spec["version"]))
            for name, spec in components.items() if name in builders and spec.get("url")}



def images(names: list[str], dest: Path) -> list[Built]:
    """One CI STAND-IN image per name, for `invoke e2e --box debian-12-e2e --offline`: an image of that name
    whose one layer holds /k4w-stand-in, a text saying what it stands for. Kubernetes 1.11's images cannot
    be built here (current Go) nor pulled (no registry is reachable); what the run proves with them is the
    Docker era's path, not the images: k4w pulls them into its cache, stages docker-save archives, and the
    guest's real Docker loads them and holds each to its pinned manifest."""
    dest.mkdir(parents=True, exist_ok=True)
    built = []
    for name in names:
        text = dest / (cluster_images.archive_name(name) + ".txt")
        text.write_text(f"k4w CI STAND-IN for {name} (ci/e2e/seed_stand_ins.py): not the real image.\n", encoding="utf-8")
        archive = dest / cluster_images.archive_name(name)
        oci_archive.write(archive, oci_archive.Image(name=name, entries=[oci_archive.Entry("/k4w-stand-in", source=text, mode=0o644)]))
        built.append(Built(name=name, archive=archive, sha256=hashlib.sha256(archive.read_bytes()).hexdigest(),
                           bytes=archive.stat().st_size, made_from={"/k4w-stand-in": "CI stand-in text"}))
    return built
