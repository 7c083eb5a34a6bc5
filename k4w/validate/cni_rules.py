"""Every Windows node's CNI config speaks a cniVersion that each plugin it runs accepts, at the
versions the node's box pins (facts/cni-plugin-versions.yml, read at the tags).

A plugin refuses a config whose cniVersion is not in its supported set ("incompatible CNI
versions"), and only at pod creation: the node goes Ready and every pod on it fails to start.
The containerd recipe asks for 1.0.0 (its plugins and containerd's libcni all speak it, and
the 0.x results carry no per-interface IPs); the seed recipe's 2018 win-overlay/win-bridge stop at
0.3.0.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from functools import lru_cache
from pathlib import Path, PurePosixPath

import yaml

from k4w.derive.cluster import Cluster
from k4w.validate.result import Result
from k4w.validate.result import from_check

FACTS = Path(__file__).resolve().parent / "facts" / "cni-plugin-versions.yml"
# flannel's Windows CNI plugin always delegates with host-local IPAM for the node's subnet.
FLANNEL_IPAM = "host-local"


@lru_cache(maxsize=1)
def facts() -> dict:
    return yaml.safe_load(FACTS.read_text(encoding="utf-8"))


def plugins_of(conf: dict) -> list[str]:
    """The plugin binaries a CNI config makes the runtime run: its type, a delegate's, the IPAM's."""
    names = [conf.get("type")]
    delegate = conf.get("delegate") or {}
    names.append(delegate.get("type"))
    names.append((conf.get("ipam") or {}).get("type"))
    if conf.get("type") == "flannel":
        names.append(FLANNEL_IPAM)
    return [n for n in dict.fromkeys(names) if n]


def release_of(components: dict, plugin: str) -> str | None:
    """'<repo>@v<version>' of the box component that ships this plugin (flannel from flannel_cni
    when the box pins one, everything else from cni)."""
    table = facts()["components"]
    name = "flannel_cni" if plugin == "flannel" and "flannel_cni" in components else "cni"
    version = (components.get(name) or {}).get("version")
    return f"{table[name]}@v{version}" if version else None


def check_conf(conf: dict, components: dict, where: str) -> list[str]:
    version = conf.get("cniVersion")
    problems = []
    for plugin in plugins_of(conf):
        release = release_of(components, plugin)
        spec = ((facts()["releases"].get(release) or {}).get("plugins") or {}).get(plugin)
        if spec is None:
            problems.append(f"{where}: no facts for CNI plugin {plugin} of {release} in {FACTS.name}: read the versions "
                            "it supports at that tag before using it")
        elif version not in spec["supports"]:
            problems.append(f"{where}: cniVersion {version!r} is not one {plugin} of {release} accepts {spec['supports']} "
                            f"({spec['file']}): every pod on the node would fail to start")
    return problems


def check(cluster: Cluster, out: Path) -> tuple[list[str], list[str]]:
    """(configs checked, problems) for every Windows node's rendered cni.conf."""
    checked, problems = [], []
    for node in cluster.config.nodes:
        profile = cluster.profile(node.box)
        if not profile.is_windows:
            continue
        path = out / "nodes" / node.name / "cni.conf"
        where = f"nodes/{node.name}/cni.conf"
        checked.append(where)
        try:
            conf = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            problems.append(f"{where}: not a readable JSON CNI config ({exc})")
            continue
        problems += check_conf(conf, dict(profile.data.get("components") or {}), where)
    return checked, problems + flannel_plugin_releases(cluster)


def _release_tag(image: str) -> str:
    return image.rsplit(":", 1)[-1].removeprefix("v")


def flannel_plugin_releases(cluster: Cluster) -> list[str]:
    """One flannel CNI plugin release on Linux and Windows: the init image the master's Flannel
    manifest installs on Linux nodes, and each Windows box's flannel_cni component. (The seed era
    has no separate flannel plugin release: it ships inside containernetworking/plugins, whose
    Windows archive starts at v0.8.0 while kubeadm 1.11's Linux packages pin 0.6.0.)"""
    image = cluster.kube.flannel_cni_plugin_image
    if not image:
        return []
    problems = []
    for name, profile in cluster.profiles.items():
        if not profile.is_windows:
            continue
        windows = ((profile.data.get("components") or {}).get("flannel_cni") or {}).get("version")
        if windows is None or windows.removeprefix("v") != _release_tag(image):
            problems.append(f"{profile.path.name}: components.flannel_cni is {windows!r}, but the Linux nodes install {image}: "
                            "pin one flannel CNI plugin release for both")
    return problems


# ------------------------------------------------------------------ the validator (k4w.validate.VALIDATORS)


def run(cluster: Cluster, out: Path) -> Result:
    return from_check("Windows CNI versions", "the pinned CNI plugins' supported versions at their tags", check(cluster, out))


def would_run(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    return [f"# in this process: cniVersion of {out / r} against k4w/validate/facts/cni-plugin-versions.yml"
            for r in sorted(rendered) if PurePosixPath(r).match("nodes/*/cni.conf")]
