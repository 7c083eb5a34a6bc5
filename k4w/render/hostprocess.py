"""What templates/manifests/windows-<recipe>/ needs: the Windows node DaemonSets of a node recipe.

A Windows box profile whose recipe runs flanneld and kube-proxy as HostProcess DaemonSets says so
with a `hostprocess:` block (boxes/windows-2022.yml): the base image, pinned by digest with its
source. Those manifests are rendered once per recipe that a node of the cluster uses, from the
recipe's profiles, which must agree on everything the manifest takes from them (one DaemonSet runs
on every node of the recipe).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from k4w.derive import identities
from k4w.derive.step_env import NODE_DIR
from k4w.infra.errors import K4wError
from k4w.model.profiles import Profile

# What the DaemonSets take from a box profile: every profile of one recipe must give the same.
SHARED_KEYS = ("hostprocess.image", "kubernetes.kube_proxy_mode", "runtime.cni_bin_dir", "runtime.cni_conf_dir", "cluster_nic_default_route")
DIGEST_MARK = "@sha256:"


@dataclass(frozen=True)
class HostProcessContext:
    namespace: str
    configmap: str
    image: str
    minor: str          # the cluster's Kubernetes minor, e.g. 1.37 (Pod Security enforce-version)
    node_dir: str
    daemonsets: dict    # component -> identities.HostProcessDaemonSet
    scripts: dict       # ConfigMap key -> script text (guest/windows/hostprocess/)


def _value(profile: Profile, dotted: str):
    node = profile.data
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def recipe_profiles(cluster) -> dict[str, list[Profile]]:
    """{templates/manifests/ folder name: the profiles of the Windows nodes using that recipe}, for
    recipes that have such a folder's worth of manifests (those naming a node_recipe)."""
    found: dict[str, list[Profile]] = {}
    for node in cluster.config.nodes:
        prof = cluster.profile(node.box)
        if prof.is_windows and prof.node_recipe and prof not in found.setdefault(prof.node_templates, []):
            found[prof.node_templates].append(prof)
    return found


def context(cluster, folder: str, profs: list[Profile], guest: Path) -> HostProcessContext:
    """The `hostprocess` template value for one recipe's manifests; K4wError naming the profile key
    when the profiles lack or disagree on a value."""
    first = profs[0]
    for key in SHARED_KEYS:
        values = {p.path.name: _value(p, key) for p in profs}
        if len({repr(v) for v in values.values()}) > 1:
            raise K4wError(f"the boxes of node recipe {folder} disagree on {key} ({values}): one DaemonSet serves them all")
    image = _value(first, "hostprocess.image")
    if not image or DIGEST_MARK not in str(image):
        raise K4wError(f"{first.path}: hostprocess.image must be the HostProcess base image pinned by digest "
                       f"(<name>:<tag>{DIGEST_MARK}<hex>), is {image!r}")
    scripts_dir = guest / "windows" / "hostprocess"
    names = [identities.HOSTPROCESS_LIBRARY, "ready-flanneld.ps1"] + [d.script for d in identities.HOSTPROCESS_DAEMONSETS]
    scripts = {}
    for name in sorted(names):
        path = scripts_dir / name
        if not path.is_file():
            raise K4wError(f"{path} is missing: the Windows node DaemonSets run it")
        scripts[name] = path.read_text(encoding="utf-8")
    return HostProcessContext(
        namespace=identities.HOSTPROCESS_NAMESPACE,
        configmap=identities.HOSTPROCESS_CONFIGMAP,
        image=str(image),
        minor=".".join(map(str, cluster.kube.minor)),
        node_dir=NODE_DIR,
        daemonsets={d.identity.component: d for d in identities.HOSTPROCESS_DAEMONSETS},
        scripts=scripts,
    )
