"""Every flag k4w passes to kubelet, kube-proxy, flanneld or kubeadm exists in the pinned version.

Syntax checks cannot see that a flag is missing from an old binary: flanneld v0.11.0 has no
--net-config-path, and a flanneld started with it prints its usage and exits. The fact tables in
facts/ list the flags each pinned version accepts, read from upstream source at its tag (each file
names repository, tag, commit and files). This module collects the flags from the rendered node
args files, the kubeadm config's kubeletExtraArgs and the guest scripts' kubeadm and kubelet
command lines, and reports any flag the table lacks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

from k4w.derive.cluster import Cluster
from k4w.derive.values import linux_kubelet_flags

FACTS = Path(__file__).resolve().parent / "facts"
FLAG = re.compile(r"(?<![\w-])--?([a-z][a-z0-9_-]*)")


@dataclass(frozen=True)
class Use:
    """One flag passed to one binary, and where."""

    binary: str  # kubelet | kube-proxy | flanneld | kubeadm init | kubeadm join
    flag: str
    where: str


@lru_cache(maxsize=None)
def _facts(name: str) -> dict:
    path = FACTS / f"{name}.yml"
    if not path.is_file():
        return {}
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def known_flags(binary: str, version: str, os_name: str) -> set[str] | None:
    """Flags the binary accepts at that version on that OS; None when no table covers it."""
    major_minor = ".".join(version.split(".")[:2])
    if binary == "flanneld":
        data = _facts(f"flanneld-{version}")
        return set(data["flags"]) if data else None
    if binary.startswith("kubeadm "):
        data = _facts(f"kubeadm-{major_minor}")
        sub = binary.split()[1]
        flags = (data.get("subcommands") or {}).get(sub) if data else None
        return set(flags) if flags else None
    data = _facts(f"{binary}-{major_minor}")
    if not data:
        return None
    flags = set(data["flags"]) | set(data.get(f"{os_name}_only") or [])
    patch = int(version.split(".")[2]) if version.count(".") >= 2 else 0
    flags |= {f for f, since in (data.get("since_patch") or {}).items() if patch >= since}
    return flags


def _args_file(path: Path, binary: str, where: str) -> list[Use]:
    uses = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if line.startswith("-"):
            uses.append(Use(binary, FLAG.match(line).group(1), f"{where}:{n}"))
    return uses


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Lines with shell (\\) and PowerShell (`) continuations joined, comments dropped."""
    out, buf, start = [], "", 0
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0] if not raw.lstrip().startswith("#") else ""
        if not buf:
            start = n
        if line.rstrip().endswith(("\\", "`")):
            buf += line.rstrip()[:-1] + " "
            continue
        out.append((start, buf + line))
        buf = ""
    return out


# A kubeadm command in bash (`kubeadm join ...`) or a PowerShell argument array (@('join', ...)).
KUBEADM_CALL = re.compile(r"(?:\bkubeadm(?:\.exe)?[\"']?\s+|@\(\s*')(init|join)\b")
# Kubelet flags carried in a variable the kubeadm drop-in expands (KUBELET_EXTRA_ARGS=...).
KUBELET_VARIABLE = re.compile(r"\bKUBELET_[A-Z_]*ARGS=")


# Flags kubeadm 1.11 accepts beside --config (ValidateMixedArguments, kubernetes/kubernetes@v1.11.10
# cmd/kubeadm/app/apis/kubeadm/validation/validation.go, called by init and by join's NewValidJoin in
# cmd/kubeadm/app/cmd/join.go; commit 7a578febe155). Later releases allow more; k4w keeps to these
# on every era, so everything else goes in the config file.
MIXABLE_WITH_CONFIG = {"config", "ignore-preflight-errors", "dry-run", "kubeconfig", "v"}


def config_mixing(uses: list[Use]) -> list[str]:
    """Problems of one kubeadm call that passes --config and flags kubeadm 1.11 refuses beside it."""
    flags = {u.flag for u in uses}
    if "config" not in flags:
        return []
    refused = sorted(f for f in flags - MIXABLE_WITH_CONFIG if not f.startswith("skip-"))
    return [f"{uses[0].where}: {uses[0].binary} --config together with --{', --'.join(refused)}: kubeadm 1.11 refuses the mix "
            "(ValidateMixedArguments); put them in the config file"] if refused else []


def _script(path: Path, rel: str) -> list[Use]:
    uses = []
    for n, line in _logical_lines(path.read_text(encoding="utf-8")):
        call = KUBEADM_CALL.search(line)
        if call:
            rest = line[call.end():]
            uses += [Use(f"kubeadm {call.group(1)}", m.group(1), f"{rel}:{n}") for m in FLAG.finditer(rest)]
        var = KUBELET_VARIABLE.search(line)
        if var:
            uses += [Use("kubelet", m.group(1), f"{rel}:{n}") for m in FLAG.finditer(line[var.end():])]
    return uses


def _kubeadm_config(path: Path) -> list[Use]:
    uses = []
    for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
        registration = (doc or {}).get("nodeRegistration") or {}
        extra = registration.get("kubeletExtraArgs") or {}
        names = [e["name"] for e in extra] if isinstance(extra, list) else list(extra)
        uses += [Use("kubelet", name, f"kubeadm/{path.name} {doc.get('kind')}.nodeRegistration.kubeletExtraArgs") for name in names]
    return uses


ARGS_FILES = {"kubelet.args": "kubelet", "kube-proxy.args": "kube-proxy", "flanneld.args": "flanneld"}


def _daemonset_args(cluster: Cluster, out: Path) -> list[tuple[Path, str, str, object]]:
    """(manifest, ConfigMap key, binary, box profile) for each args key of the Windows node DaemonSets
    rendered for a node recipe (OUT/manifests/windows-<recipe>/), judged against that recipe's box."""
    from k4w.derive import identities

    found, seen = [], set()
    for profile in cluster.profiles.values():
        # One manifest per recipe: its boxes agree on what it takes from them (k4w.render.hostprocess).
        if not identities.runs_hostprocess(profile) or profile.node_templates in seen:
            continue
        seen.add(profile.node_templates)
        for manifest in sorted((out / "manifests" / profile.node_templates).glob("*.yaml")):
            for entry in identities.HOSTPROCESS_DAEMONSETS:
                if _configmap_value(manifest, entry.args_key):
                    found.append((manifest, entry.args_key, ARGS_FILES[entry.args_key], profile))
    return found


def _configmap_value(manifest: Path, key: str) -> str:
    try:
        docs = [d for d in yaml.safe_load_all(manifest.read_text(encoding="utf-8")) if isinstance(d, dict)]
    except yaml.YAMLError:
        return ""  # the manifest rules name a broken manifest
    return next((str(d["data"][key]) for d in docs if d.get("kind") == "ConfigMap" and key in (d.get("data") or {})), "")


def check(cluster: Cluster, out: Path) -> tuple[list[str], list[str]]:
    """(what was checked, problems)."""
    checked: list[str] = []
    problems: list[str] = []
    k8s = str(cluster.kube.version)

    def judge(uses: list[Use], versions: dict[str, str], os_name: str) -> None:
        for use in uses:
            version = versions.get(use.binary.split()[0]) or ""
            known = known_flags(use.binary, version, os_name)
            if known is None:
                problems.append(f"{use.where}: no flag table for {use.binary} {version or '?'} in k4w/validate/facts/; "
                                f"add one from upstream source before using that version")
            elif use.flag not in known:
                problems.append(f"{use.where}: {use.binary} {version} has no flag --{use.flag} "
                                f"(k4w/validate/facts/, read from upstream source at that tag)")

    for node in cluster.config.nodes:
        profile = cluster.profiles[node.box]
        folder = out / "nodes" / node.name
        if not folder.is_dir():
            continue
        versions = {"kubelet": profile.kubernetes_version, "kube-proxy": profile.kubernetes_version,
                    "flanneld": str(((profile.data.get("components") or {}).get("flannel") or {}).get("version", ""))}
        for name, binary in ARGS_FILES.items():
            if (folder / name).is_file():
                checked.append(f"nodes/{node.name}/{name}")
                judge(_args_file(folder / name, binary, f"nodes/{node.name}/{name}"), versions, profile.data.node_os)
    # The containerd era's Windows node DaemonSets carry their flags in a ConfigMap (one key per binary).
    for manifest, key, binary, profile in _daemonset_args(cluster, out):
        where = f"{manifest.relative_to(out).as_posix()} ConfigMap {key}"
        checked.append(where)
        versions = {"kube-proxy": profile.kubernetes_version,
                    "flanneld": str(((profile.data.get("components") or {}).get("flannel") or {}).get("version", ""))}
        uses = [Use(binary, m.group(1), f"{where}:{n}") for n, line in enumerate(_configmap_value(manifest, key).splitlines(), 1)
                if (m := FLAG.match(line.strip())) and line.strip().startswith("-")]
        judge(uses, versions, profile.data.node_os)
    for node in cluster.config.nodes:
        profile = cluster.profiles[node.box]
        flags = linux_kubelet_flags(profile) if profile.data.node_os == "linux" else []
        if flags:
            where = f"{profile.path.name} kubernetes (kubelet flags of a joining worker, k4w.derive.values.linux_kubelet_flags)"
            checked.append(where)
            judge([Use("kubelet", m.group(1), where) for flag in flags for m in FLAG.finditer(flag.split("=", 1)[0])],
                  {"kubelet": profile.kubernetes_version}, "linux")
    for path in sorted((out / "kubeadm").glob("*.yaml")):
        checked.append(f"kubeadm/{path.name}")
        judge(_kubeadm_config(path), {"kubelet": k8s}, "linux")
    repo = cluster.sources
    for os_dir, os_name in (("ubuntu", "linux"), ("windows", "windows")):
        for path in sorted((repo.guest / os_dir).rglob("*")):
            if path.suffix in (".sh", ".ps1"):
                rel = path.relative_to(repo.root).as_posix()
                uses = _script(path, rel)
                if uses:
                    checked.append(rel)
                judge(uses, {"kubeadm": k8s, "kubelet": k8s}, os_name)
                for where in sorted({u.where for u in uses if u.binary.startswith("kubeadm ")}):
                    problems += config_mixing([u for u in uses if u.where == where and u.binary.startswith("kubeadm ")])
    return checked, problems
