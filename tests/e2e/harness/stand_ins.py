"""CI STAND-INS for the downloads CI cannot reach (dl.k8s.io, GitHub), in the layout of the real files.

The same builders serve both eras' CI profiles (tests/e2e/boxes/): the Kubernetes node tarball and
the CNI plugins, and for the containerd era also containerd's release tarball and runc.

CI's network reaches only the package registries, so the end-to-end run cannot download
Kubernetes' node tarball or the CNI plugins. These builders make files with the same names and
the same inner layout, whose programs are small shell scripts that answer the version queries the
box step and the box spec make with the pinned version. They are NOT Kubernetes or CNI: nothing in
them can run a node. The README names them as stand-ins.

They are byte-for-byte reproducible (fixed times, owners, modes and order; gzip without a time
stamp), so tests/e2e/boxes/debian-12-e2e.yml pins their sha512/sha256 like any profile, and the
real step 04 installs them from the host cache through the real fetch and build-media path. A
test (tests/e2e/test_e2e_parts.py) checks the pins against what these functions build.
"""

from __future__ import annotations

import gzip
import io
import tarfile
from urllib.parse import urlsplit

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
# containerd's release tarball (containerd-<v>-linux-amd64.tar.gz) holds bin/<these> (and
# containerd-stress); each stand-in answers the version query of 03-containerd.sh and the box spec.
_CONTAINERD_ANSWERS = {
    "containerd": {"--version": "containerd github.com/containerd/containerd/v2 v{v} k4w-ci-stand-in"},
    "ctr": {"--version": "ctr github.com/containerd/containerd/v2 v{v}"},
    "containerd-shim-runc-v2": {"-v": "containerd-shim-runc-v2:\n  Version:  v{v}"},
}


def _script(name: str, answers: dict[str, str]) -> bytes:
    cases = "".join(f'    "{query}") echo "{answer}" ;;\n' for query, answer in answers.items())
    return (f"#!/bin/sh\n# k4w CI STAND-IN for {name} (tests/e2e/harness/stand_ins.py): not the real program.\n"
            f'case "$*" in\n{cases}'
            f'    *) echo "k4w CI stand-in for {name}: cannot run \'$*\'" >&2; exit 3 ;;\nesac\n').encode()


def _tar_gz(members: dict[str, bytes]) -> bytes:
    """A .tar.gz whose bytes depend only on members (path -> content, all executables)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        folders = sorted({"/".join(path.split("/")[:i]) for path in members for i in range(1, path.count("/") + 1)})
        for folder in folders:
            info = tarfile.TarInfo(folder)
            info.type, info.mode, info.mtime, info.uname, info.gname = tarfile.DIRTYPE, 0o755, 0, "root", "root"
            tar.addfile(info)
        for path in sorted(members):
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime, info.uname, info.gname = len(members[path]), 0o755, 0, "root", "root"
            tar.addfile(info, io.BytesIO(members[path]))
    packed = io.BytesIO()
    with gzip.GzipFile(fileobj=packed, mode="wb", compresslevel=9, mtime=0, filename="") as gz:
        gz.write(raw.getvalue())
    return packed.getvalue()


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".")[:3])


def node_tarball(version: str) -> bytes:
    """kubernetes-node-linux-amd64.tar.gz's layout: kubernetes/node/bin/<binary>."""
    answers = {name: dict(queries) for name, queries in _NODE_ANSWERS.items()}
    if _release(version)[:2] >= _KUBECTL_PLAIN_CLIENT_VERSION:
        del answers["kubectl"]["version --client --short"]  # gone from kubectl 1.28 on
        answers["kubectl"]["version --client"] = "Client Version: v{v}"
    return _tar_gz({f"kubernetes/node/bin/{name}": _script(name, {q: a.format(v=version) for q, a in queries.items()})
                    for name, queries in answers.items()})


def cni_tarball(version: str) -> bytes:
    """cni-plugins-amd64-v<version>.tgz's layout: the plugins at the top level."""
    plugins = [name for name in CNI_PLUGINS if name != "flannel" or _release(version) < (1, 0, 0)]
    return _tar_gz({f"./{name}": _script(f"CNI plugin {name} v{version}", {}) for name in plugins})


def containerd_tarball(version: str) -> bytes:
    """containerd-<version>-linux-amd64.tar.gz's layout: bin/<program>. The stand-ins only print
    versions: no daemon runs (03-containerd.sh leaves the service stopped under K4W_CONTAINERD_STAND_IN)."""
    return _tar_gz({f"bin/{name}": _script(name, {q: a.format(v=version) for q, a in queries.items()})
                    for name, queries in _CONTAINERD_ANSWERS.items()})


def runc_binary(version: str) -> bytes:
    """runc.amd64: one program, no archive."""
    return _script("runc", {"--version": f"runc version {version}\nspec: k4w-ci-stand-in"})


def for_profile(components: dict) -> dict[str, bytes]:
    """{url: bytes} for the profile's components that have a stand-in."""
    builders = {"kubernetes": node_tarball, "cni": cni_tarball, "containerd": containerd_tarball, "runc": runc_binary}
    return {str(spec["url"]): builders[name](str(spec["version"]))
            for name, spec in components.items() if name in builders and spec.get("url")}


def mirror_paths(files: dict[str, bytes]) -> dict[str, bytes]:
    """The same files at their downloads.mirror places (<mirror>/<host>/<path>, k4w.bake.cache.mirror_url)."""
    return {f"/{urlsplit(url).hostname}{urlsplit(url).path}": body for url, body in files.items()}
