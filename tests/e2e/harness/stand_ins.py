"""CI STAND-INS for the downloads CI cannot reach (dl.k8s.io, GitHub), in the layout of the real files.

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

# What the box step (guest/ubuntu/bake/04-kubernetes.sh) and the box spec ask each binary, and
# the answer the real 1.11 binary gives (kubectl's --client without --short prints version.Info,
# abridged here to the fields a reader of the version uses).
_NODE_ANSWERS = {
    "kubeadm": {"version -o short": "v{v}"},
    "kubelet": {"--version": "Kubernetes v{v}"},
    "kubectl": {"version --client --short": "Client Version: v{v}",
                "version --client": 'Client Version: version.Info{{Major:"1", GitVersion:"v{v}"}}'},
    "kube-proxy": {"--version": "Kubernetes v{v}"},
}
# The plugins kubeadm's kubelet expects in /opt/cni/bin (cni-plugins-amd64-v0.6.0.tgz holds these
# and more; the stand-in keeps the ones the box spec looks for).
CNI_PLUGINS = ("bridge", "flannel", "host-local", "loopback", "portmap")


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


def node_tarball(version: str) -> bytes:
    """kubernetes-node-linux-amd64.tar.gz's layout: kubernetes/node/bin/<binary>."""
    return _tar_gz({f"kubernetes/node/bin/{name}": _script(name, {q: a.format(v=version) for q, a in answers.items()})
                    for name, answers in _NODE_ANSWERS.items()})


def cni_tarball(version: str) -> bytes:
    """cni-plugins-amd64-v<version>.tgz's layout: the plugins at the top level."""
    return _tar_gz({f"./{name}": _script(f"CNI plugin {name} v{version}", {}) for name in CNI_PLUGINS})


def for_profile(components: dict) -> dict[str, bytes]:
    """{url: bytes} for the profile's components that have a stand-in."""
    builders = {"kubernetes": node_tarball, "cni": cni_tarball}
    return {str(spec["url"]): builders[name](str(spec["version"]))
            for name, spec in components.items() if name in builders and spec.get("url")}


def mirror_paths(files: dict[str, bytes]) -> dict[str, bytes]:
    """The same files at their downloads.mirror places (<mirror>/<host>/<path>, k4w.bake.cache.mirror_url)."""
    return {f"/{urlsplit(url).hostname}{urlsplit(url).path}": body for url, body in files.items()}
