"""The rules across the fields of cluster.yml, and between its nodes and their box profiles.

k4w.config is the data model: each section's fields and their syntax. These rules look at several
sections at once (one master, node IPs inside network.node_cidr, enough pod subnets, one CA and
login per mirror host), and at boxes/<box>.yml (each node against its box, the version skew between
the boxes, the registry mirrors a Docker box can use). Config's validator calls problems(), so each
problem is reported with its line in the file like any other (k4w.config._explain). This module
imports the model's types for annotations only: the model imports it, not the other way round.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import profiles
from k4w.infra.errors import K4wError
from .version_skew import skew_problem

if TYPE_CHECKING:
    from .config import Config, Node, RegistryMirror


def problems(cfg: Config) -> list[str]:
    """Every cross-field problem of cfg, one line each, in the order of the file's sections and nodes."""
    found: list[str] = []
    masters = [n for n in cfg.nodes if n.role == "master"]
    if cfg.cluster.existing:
        # The existing cluster has its control plane; k4w only adds workers to it.
        found += [f"nodes[{i}].role: master is not allowed with cluster.existing (the cluster at "
                  f"{cfg.cluster.existing} has its own control plane); list only workers"
                  for i, n in enumerate(cfg.nodes) if n.role == "master"]
    elif len(masters) != 1:
        found.append(f"nodes: exactly one node must have role 'master', found {len(masters)}")
    # Each provider's settings live under its own key; the other provider's key means the file was written
    # for another host, and silently ignoring it would build something else than the user reads.
    other = {"hyperv": "libvirt", "libvirt": "hyperv"}[cfg.host.provider]
    if other in cfg.model_fields_set:
        keys = sorted(getattr(cfg, other).model_fields_set) or ["(empty block)"]
        found.append(f"{other}: host.provider is {cfg.host.provider}, so the {other} settings "
                     f"({', '.join(other + '.' + k for k in keys)}) would be ignored; remove them or set host.provider: {other}")
    if cfg.host.provider == "libvirt":
        for name, net in (("network.node_cidr", cfg.network.node_cidr), ("network.pod_cidr", cfg.network.pod_cidr),
                          ("network.service_cidr", cfg.network.service_cidr)):
            if net.overlaps(cfg.libvirt.management_cidr):
                found.append(f"libvirt.management_cidr: {cfg.libvirt.management_cidr} overlaps {name} {net}")
        if cfg.libvirt.management_network == cfg.libvirt.cluster_network:
            found.append(f"libvirt.cluster_network: '{cfg.libvirt.cluster_network}' is also the management network; "
                         "each VM needs two networks")
    gateway = cfg.hyperv.cluster_gateway or next(cfg.network.node_cidr.hosts())
    if gateway not in cfg.network.node_cidr:
        found.append(f"hyperv.cluster_gateway: {gateway} is outside network.node_cidr {cfg.network.node_cidr}")
    # Flannel leases each node a /24 (its SubnetLen default) out of pod_cidr.
    subnets = 2 ** (24 - cfg.network.pod_cidr.prefixlen)
    if subnets < len(cfg.nodes):
        found.append(
            f"network.pod_cidr: {cfg.network.pod_cidr} holds {subnets} /24 node subnets, fewer than the "
            f"{len(cfg.nodes)} nodes; use a larger range"
        )
    seen_names: dict[str, int] = {}
    seen_ips: dict[str, int] = {}
    for i, node in enumerate(cfg.nodes):
        where = f"nodes[{i}]"
        if node.name in seen_names:
            found.append(f"{where}.name: '{node.name}' is already used by nodes[{seen_names[node.name]}]")
        seen_names.setdefault(node.name, i)
        if str(node.ip) in seen_ips:
            found.append(f"{where}.ip: {node.ip} is already used by nodes[{seen_ips[str(node.ip)]}]")
        seen_ips.setdefault(str(node.ip), i)
        net = cfg.network.node_cidr
        if node.ip not in net:
            found.append(f"{where}.ip: {node.ip} is outside network.node_cidr {net}")
        elif node.ip in (net.network_address, net.broadcast_address):
            found.append(f"{where}.ip: {node.ip} is the network or broadcast address of {net}")
        elif node.ip == gateway:
            found.append(f"{where}.ip: {node.ip} is reserved for the host gateway on the cluster switch")
        found += node_box_problems(cfg, i, node)
    found += version_skew_problems(cfg)
    found += mirror_host_problems(cfg)
    found += docker_mirror_problems(cfg)
    return found


def node_box_problems(cfg: Config, i: int, node: Node) -> list[str]:
    """What is wrong with nodes[i] on its box: an unknown or broken profile, a name or role Windows
    refuses, too little memory, a Flannel backend the box does not run."""
    where = f"nodes[{i}]"
    try:
        profile = profiles.load(node.box)
    except K4wError as exc:
        known = ", ".join(profiles.available())
        # A profile that exists but is broken says what is wrong with it, not "unknown".
        return [f"{where}.box: unknown box '{node.box}' (known boxes: {known})" if str(exc).startswith("unknown box")
                else f"{where}.box: {exc}"]
    problems: list[str] = []
    data = profile.data
    if profile.is_windows and node.name.isdigit():
        # Microsoft, unattend reference "Microsoft-Windows-Shell-Setup | ComputerName": a name
        # that DnsValidateName refuses, e.g. one of digits only, cannot be used.
        problems.append(f"{where}.name: '{node.name}' is digits only, which Windows refuses as a computer name "
                        "(ComputerName must pass DnsValidateName); add a letter")
    if node.role == "master" and profile.is_windows:
        problems.append(f"{where}.role: a Windows node cannot be the master (kubeadm control plane is Linux only)")
    # A box bakes only for the hosts its profile lists (build.providers, default hyperv): the seed-era boxes
    # (ubuntu-1604's debian-installer, Windows Server 1803) have Hyper-V recipes alone, so on another host
    # the render would have no source to write for them. The CI profiles' qemu builder (build.builder qemu,
    # an installed disk image) runs QEMU itself on any Linux host: it serves both.
    build = data.get("build") or {}
    providers = build.get("providers") or (["hyperv", "libvirt"] if build.get("builder") == "qemu" else ["hyperv"])
    if cfg.host.provider not in providers:
        problems.append(f"{where}.box: {node.box} bakes only for {', '.join(providers)} (build.providers in "
                        f"{profile.path.name}), not for host.provider {cfg.host.provider}: k4w has no {cfg.host.provider} "
                        f"recipe for its installer (the seed era's boxes install on Hyper-V alone); a box of the containerd "
                        f"era (ubuntu-2404, ubuntu-2604, windows-2022, windows-2025) bakes for both")
    if node.memory < data.min_memory_mb:
        problems.append(f"{where}.memory: {node.memory} MiB is too small for {node.box}; it needs at least {data.min_memory_mb} MiB")
    if cfg.network.backend == "vxlan" and not data.supports_vxlan:
        problems.append(
            f"network.backend: vxlan is not supported by box {node.box} (nodes[{i}]); "
            f"Flannel vxlan on Windows needs Server 2019 (17763.379+), use host-gw"
        )
    if cfg.network.backend == "host-gw" and data.get("supports_host_gw") is False:
        problems.append(
            f"network.backend: host-gw is not supported by box {node.box} (nodes[{i}]); its node recipe "
            f"runs Flannel vxlan only (Windows host-gw bugs are closed wontfix upstream), use vxlan"
        )
    return problems


def version_skew_problems(cfg: Config) -> list[str]:
    """Every worker's kubelet within the version-skew policy of the master's API server: a seed-era
    box (1.11) beside a containerd-era master (1.37) would be planned and built, then never join."""
    masters = [n for n in cfg.nodes if n.role == "master"]
    if len(masters) != 1:
        return []  # no master here (cluster.existing: k4w.cluster.facts checks the real API server)
    try:
        apiserver = profiles.load(masters[0].box).kubernetes_version
    except (K4wError, AttributeError):
        return []  # an unknown box is reported with its node
    problems = []
    for i, node in enumerate(cfg.nodes):
        if node.role == "master":
            continue
        try:
            kubelet = profiles.load(node.box).kubernetes_version
        except (K4wError, AttributeError):
            continue
        problem = skew_problem(f"{apiserver} (the master's box {masters[0].box})", kubelet, f"{node.name}'s box {node.box}")
        if problem:
            problems.append(f"nodes[{i}].box: {problem}; pick boxes of one era")
    return problems


def mirror_host_problems(cfg: Config) -> list[str]:
    """Two upstreams mirrored on one host need the same CA, credentials and plain_http there:
    containerd keys credentials by host and k4w ships one CA per host folder."""
    found: list[str] = []
    by_host: dict[str, tuple[str, RegistryMirror]] = {}
    for upstream, mirror in cfg.registry.mirrors.items():
        host = mirror.host
        if host in by_host:
            other, seen = by_host[host]
            if (seen.ca, seen.userinfo, seen.plain_http) != (mirror.ca, mirror.userinfo, mirror.plain_http):
                found.append(f"registry.mirrors.{upstream}: its mirror host {host} is also {other}'s, with another ca, "
                             "credentials or plain_http; one host has one of each")
        by_host.setdefault(host, (upstream, mirror))
    return found


def docker_mirror_problems(cfg: Config) -> list[str]:
    """The registry mirrors a Docker box cannot use: Docker mirrors docker.io only, with no CA,
    credentials, plain HTTP or repository path of k4w's making. A box that loads its images from the
    build host (Profile.imports_images) never asks another upstream's mirror: k4w on the host pulls
    through it (with its CA and credentials), and kubeadm and the kubelet find every image loaded
    under the names they use. Its docker.io mirror still serves the workloads' images, so its rules
    stay."""
    problems: list[str] = []
    if not cfg.registry.mirrors:
        return problems
    for box in cfg.boxes():
        try:
            profile = profiles.load(box)
        except K4wError:
            continue  # reported with the node
        if profile.container_runtime != "docker":
            continue
        kube_registry = str((profile.data.get("kubernetes") or {}).get("image_repository") or "registry.k8s.io").split("/")[0]
        for upstream, mirror in cfg.registry.mirrors.items():
            if upstream != "docker.io" and profile.imports_images(cfg.downloads.images):
                continue
            if upstream not in ("docker.io", kube_registry):
                problems.append(
                    f"registry.mirrors.{upstream}: box {box} runs Docker, which mirrors docker.io only (daemon.json "
                    f"registry-mirrors), and k4w points kubeadm's imageRepository at a {kube_registry} mirror; "
                    f"{upstream} cannot be mirrored there: remove it, or use containerd-era boxes")
            elif mirror.ca or mirror.plain_http or mirror.userinfo is not None:
                problems.append(
                    f"registry.mirrors.{upstream}: box {box} runs Docker, for which k4w writes no certs.d CA, "
                    "insecure-registries entry or docker login: give the seed era a public-CA https mirror "
                    "without credentials, or use containerd-era boxes")
            elif upstream == "docker.io" and mirror.path.strip("/"):
                # moby registry/config.go ValidateMirror refuses a path ("invalid mirror: path, query,
                # or fragment at end of the URI").
                problems.append(
                    f"registry.mirrors.docker.io: box {box} runs Docker, whose registry-mirrors takes a mirror "
                    "host without a path; give the mirror's own host, or use containerd-era boxes")
    return problems
