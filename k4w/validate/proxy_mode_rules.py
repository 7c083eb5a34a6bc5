"""kube-proxy's mode is set explicitly on the containerd era, to a mode the pinned kube-proxy accepts on that OS.

A KubeProxyConfiguration without `mode` (or a Windows kube-proxy without --proxy-mode) runs whatever the
release defaults to, and that default is kube-proxy's to change (1.37 already warns about ipvs and offers
nftables). So on the era that renders kubeadm v1beta4 the rendered kube-proxy configuration of the Linux
nodes (kubeadm's KubeProxyConfiguration document) and the arguments of the Windows kube-proxy must name
a mode, and the mode must be one the pinned release's own validation accepts on that OS without
a feature gate: facts/kube-proxy-<minor>.yml `modes`, generated from
pkg/proxy/apis/config/validation/validation.go at the tag (scripts/flag-table). The seed era's kubeadm
config (v1alpha2) is not held to this: its 1.11 kube-proxy is left as it was built.

On Windows kube-proxy runs as a HostProcess DaemonSet of the node recipe (k4w.render.hostprocess): its
arguments are the `kube-proxy.args` key of the ConfigMap rendered under OUT/manifests/<recipe>/, one
DaemonSet for every node of that recipe, so the rule reads them there, once per recipe.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

import yaml

from k4w.derive import identities
from k4w.derive.cluster import Cluster
from .flag_rules import _configmap_value, _facts
from . import flag_rules
from .result import Result

V1BETA4 = "kubeadm.k8s.io/v1beta4"
PROXY_CONFIG = ("kubeproxy.config.k8s.io/v1alpha1", "KubeProxyConfiguration")


def _modes(version: str, os_name: str, where: str) -> tuple[list[str] | None, list[str]]:
    minor = ".".join(str(version).split(".")[:2])
    modes = (_facts(f"kube-proxy-{minor}").get("modes") or {}).get(os_name)
    if modes:
        return modes, []
    return None, [f"{where}: k4w/validate/facts/kube-proxy-{minor}.yml lists no {os_name} modes; generate it "
                  f"from the tag's source (scripts/flag-table kube-proxy-{minor}) before rendering kube-proxy {version}"]


def _kubeadm_config(path: Path, version: str) -> tuple[bool, list[str]]:
    """(is a v1beta4 config, problems) of one rendered kubeadm config."""
    where = f"kubeadm/{path.name}"
    docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if isinstance(d, dict)]
    if not any(d.get("apiVersion") == V1BETA4 for d in docs):
        return False, []
    proxy = [d for d in docs if (d.get("apiVersion"), d.get("kind")) == PROXY_CONFIG]
    if not proxy:
        return True, [f"{where}: no KubeProxyConfiguration document: kube-proxy's mode must be set explicitly"]
    modes, problems = _modes(version, "linux", where)
    for doc in proxy:
        mode = doc.get("mode")
        if not mode:
            problems.append(f"{where} KubeProxyConfiguration: no mode; kube-proxy {version} would pick its own default "
                            f"(set kubernetes.kube_proxy_mode in the master's box profile)")
        elif modes is not None and mode not in modes:
            problems.append(f"{where} KubeProxyConfiguration.mode: {mode!r} is not a mode kube-proxy {version} accepts "
                            f"on Linux without a feature gate ({', '.join(modes)})")
    return True, problems


def _windows_args(text: str, where: str, version: str) -> list[str]:
    values = [line.strip().split("=", 1)[1] if "=" in line else "" for line in text.splitlines()
              if line.strip().split("=", 1)[0] == "--proxy-mode"]
    if len(values) != 1:
        return [f"{where}: --proxy-mode is given {len(values)} times; kube-proxy's mode must be set exactly once"]
    modes, problems = _modes(version, "windows", where)
    if modes is not None and values[0] not in modes:
        problems.append(f"{where}: --proxy-mode={values[0]} is not a mode kube-proxy {version} accepts on Windows "
                        f"({', '.join(modes)})")
    return problems


def _daemonset_args(out: Path, recipe: str) -> tuple[str, str]:
    """(where, text) of the kube-proxy args in the ConfigMap of a node recipe's DaemonSets; text "" if none."""
    key = identities.hostprocess_by_component("kube-proxy").args_key
    for manifest in sorted((out / "manifests" / recipe).glob("*.yaml")):
        text = _configmap_value(manifest, key)
        if text:
            return f"{manifest.relative_to(out).as_posix()} ConfigMap {key}", text
    return f"manifests/{recipe}/ ConfigMap {key}", ""


def check(cluster: Cluster, out: Path) -> tuple[list[str], list[str]]:
    """(what was checked, problems)."""
    checked: list[str] = []
    problems: list[str] = []
    for path in sorted((out / "kubeadm").glob("*.yaml")):
        is_v1beta4, found = _kubeadm_config(path, str(cluster.kube.version))
        if is_v1beta4:
            checked.append(f"kubeadm/{path.name} (kube-proxy mode)")
            problems += found
    recipes: set[str] = set()
    for node in cluster.config.nodes:
        profile = cluster.profiles[node.box]
        kube = profile.data.kubernetes
        if profile.data.node_os != "windows" or kube.get("kubeadm_api") != V1BETA4 or profile.node_templates in recipes:
            continue
        recipes.add(profile.node_templates)
        where, text = _daemonset_args(out, profile.node_templates)
        if not text:
            problems.append(f"{where}: not rendered for {node.name} ({node.box}); the containerd era runs the Windows "
                            f"kube-proxy as a HostProcess DaemonSet whose mode must be set there")
            continue
        checked.append(f"{where} (kube-proxy mode)")
        problems += _windows_args(text, where, str(kube.version))
    return checked, problems


# ------------------------------------------------------------------ the validator (k4w.validate.VALIDATORS)


def run(cluster: Cluster, out: Path) -> Result:
    """Every flag of the pinned binaries (flag_rules), and kube-proxy's mode, which is a value of a flag
    (Windows) or of its config (Linux), held against the same tables: one validator, here because this
    module builds on flag_rules."""
    res = Result("flags of the pinned binaries", "flag tables from upstream source")
    res.checked, res.problems = flag_rules.check(cluster, out)
    checked, problems = check(cluster, out)
    res.checked += checked
    res.problems += problems
    return res


def would_run(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    return [f"# in this process: every kubelet, kube-proxy, flanneld and kubeadm flag in {out / 'nodes'}, "
            f"{out / 'kubeadm'} and guest/ against k4w/validate/facts/, and kube-proxy's explicit mode"]
