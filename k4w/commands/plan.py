"""`invoke plan`: what the config means and what the build and cluster stages would run."""

from __future__ import annotations

import contextlib
import datetime as dt
from pathlib import Path

from k4w.media import build_media, iso
from k4w.derive import identities, registry
from k4w.infra import packer_hcl, ui
from k4w.model import patch_level
from k4w.bake import fetch, gate, image_cache
from k4w.infra import packer_cli
from k4w.cluster import libvirt_network
from k4w.derive.cluster import Cluster
from k4w.model.profiles import Profile


def _image_tag(image: str | None) -> str | None:
    """registry/name:v0.28.10 -> v0.28.10 (a digest or a bare name gives None)."""
    if not image or "@" in image:
        return None
    name, _, tag = image.rpartition(":")
    return tag if name and "/" not in tag else None


def box_versions(profile: Profile, today: dt.date | None = None) -> dict[str, str]:
    """What a box runs, as one plan row each: every value read from its profile, '-' when the
    profile pins nothing for it (a Linux box's CNI may come with its Kubernetes packages)."""
    data = profile.data
    kube = data.get("kubernetes") or {}
    components = data.get("components") or {}
    runtime = profile.container_runtime
    # Windows runs flanneld.exe (a component); Linux runs the image of the manifest (kubernetes.flannel_image).
    flannel = (components.get("flannel") or {}).get("version") or _image_tag(kube.get("flannel_image"))
    iso_info = data.get("iso") or {}
    return {
        "Kubernetes": str(kube.get("version") or "-"),
        "kubeadm API": str(kube.get("kubeadm_api") or "-").rpartition("/")[2],
        "container runtime": f"{runtime} {components[runtime].get('version', '?')}" if runtime in components else "-",
        "Flannel": str(flannel or "-"),
        "CNI plugins": str((components.get("cni") or {}).get("version") or "-"),
        "ISO": str(iso_info.get("name") or "-"),
        # The level the box is baked at, build.UBR, and how old the update that is that UBR is: the pinned
        # cumulative update's or, with none, the ISO's (k4w/model/patch_level.py; `invoke validate` holds it).
        "patch level": level.describe(today or dt.date.today()) if (level := patch_level.level(profile)) else "-",
    }


def versions_table(cluster: Cluster) -> None:
    """The version matrix of the boxes in use, one column per box, side by side."""
    boxes = {box: box_versions(prof) for box, prof in cluster.profiles.items()}
    rows = [[what, *(versions[what] for versions in boxes.values())] for what in next(iter(boxes.values()))]
    ui.table("Box versions (boxes/<box>.yml)", ["", *boxes], rows)


def network_up_lines(cluster: Cluster) -> list[str]:
    """What `invoke network-up` makes on this provider's host, one line per switch or network."""
    cfg, net = cluster.config, cluster.network
    if cfg.host.provider == "libvirt":
        return libvirt_network.plan_lines(cfg)
    if cfg.hyperv.cluster_switch_type == "Internal":
        return [f"network-up: Internal switch '{cfg.hyperv.cluster_switch}', host address {net.gateway}/{net.node_prefixlen}, NetNat for {net.node_cidr}"]
    return [f"network-up: External switch '{cfg.hyperv.cluster_switch}' on adapter '{cfg.hyperv.cluster_adapter}', no NetNat: "
            f"your network routes {net.node_cidr} via {net.gateway}"]


def show(cluster: Cluster, out: Path, files: dict[str, str], dry_run: bool = False) -> None:
    """files: the render the plan describes (written to out, or for a dry run only in memory)."""
    cfg, net, proxy = cluster.config, cluster.network, cluster.proxy
    rows = []
    for node in cfg.nodes:
        prof = cluster.profile(node.box)
        rows.append([node.name, node.role, node.box, prof.data.node_os, node.ip, node.cpus, f"{node.memory} MiB"])
    ui.table("Nodes", ["name", "role", "box", "os", "cluster IP", "cpus", "memory"], rows)
    versions_table(cluster)

    ui.table(
        "Derived once, used by every artifact",
        ["value", "setting"],
        [
            ["API server", f"the existing cluster's ({cfg.cluster.existing})" if cfg.joins_existing else f"https://{net.api_ip}:{net.api_port}"],
            ["pod CIDR (kubeadm, Flannel, Windows CNI, kube-proxy)", net.pod_cidr],
            ["service CIDR", net.service_cidr],
            ["cluster DNS IP (kubelet --cluster-dns)", net.dns_ip],
            ["node CIDR / host gateway", f"{net.node_cidr} / {net.gateway}"],
            ["Flannel backend", f"{net.backend} (Windows HNS network '{net.windows_network_name}')"],
            ["HTTP proxy", proxy.http or "none"],
            ["HTTPS proxy", proxy.https or "none"],
            ["NO_PROXY", proxy.no_proxy_str or "-"],
        ],
    )

    if cfg.registry.mirrors:
        ui.table("Registry mirrors (cluster.yml registry.mirrors)", ["upstream", "mirror endpoint", "TLS", "images of boxes"],
                 registry.plan_rows(cfg, dict(cluster.profiles)))

    groups: dict[str, int] = {}
    for rel in files:
        groups[rel.split("/")[0]] = groups.get(rel.split("/")[0], 0) + 1
    # The render itself already said how many files it wrote (or would write) where.
    ui.say("Artifacts by folder: " + ", ".join(f"{k}/ {v}" for k, v in sorted(groups.items())))

    host_kind = "a Linux host with libvirt" if cfg.host.provider == "libvirt" else "a Hyper-V host"
    ui.say(f"\nBuild plan ({host_kind} runs these; `--dry-run` on each task shows the same):", style="bold")
    # The build's own refusals (k4w.bake.gate), so the plan never promises a build that stops.
    targets = [gate.Target(prof, packer_hcl.parse(files[packer_hcl.rel_path(box)], packer_hcl.rel_path(box))) for box, prof in cluster.profiles.items()]
    with contextlib.ExitStack() as stack:
        folder = stack.enter_context(gate.scratch_render(cluster)) if dry_run else out
        decision = gate.decide(cluster, targets, out, folder, ui.console, write_cache=not dry_run)
    for what, problems in (("this host", decision.host), ("packer", decision.packer), ("validate", decision.validation)):
        for problem in problems:
            ui.say(f"BLOCKED ({what}, every box): {problem}", style="yellow")
    for step, (box, prof) in enumerate(cluster.profiles.items(), 1):
        task = "build-windows" if prof.is_windows else "build-ubuntu"
        iso_file = iso.iso_path(prof)
        known = iso.iso_sha256(prof)
        state = "present" if iso_file.is_file() else "missing"
        ui.say(f"{step}. invoke {task}: box {box}, ISO {iso_file.name} ({state}, sha256 {'pinned' if known else 'UNKNOWN: run invoke iso-add'})")
        ui.say(f"   first the host cache (invoke fetch --box {box}): {fetch.box_summary(cluster, box)}; "
               f"staged in {build_media.folder(out, box)} for {build_media.delivery(prof)}")
        images_line = image_cache.box_summary(cluster, box)
        if images_line:
            ui.say(f"   and the image cache (downloads.images: cache): {images_line}")
        ui.command(packer_cli.build_command(out / packer_hcl.rel_path(box), packer="packer"))
        # The provider the vagrant post-processor names the box for (hyperv-iso: hyperv, qemu: libvirt).
        provider = packer_hcl.box_provider(targets[step - 1].template) or "hyperv"
        ui.say(f"   -> {out / 'boxes' / f'{box}-{provider}.box'} and catalogue {out / 'boxes' / f'{box}.json'}")
        for problem in decision.boxes.get(box, []):
            ui.say(f"   BLOCKED: {problem}".replace("\n", "\n   "), style="yellow")
    if not decision.refused:
        ui.say("Nothing blocks the builds on this host.")

    if cfg.joins_existing:
        from k4w.cluster import existing

        existing.show_plan(cluster, out, files)
        return
    ui.say("\nCluster plan (invoke network-up once, then invoke cluster-up):", style="bold")
    workers_linux = [n.name for n in cfg.nodes if n.role == "worker" and not cluster.profile(n.box).is_windows]
    workers_win = [n.name for n in cfg.nodes if cluster.profile(n.box).is_windows]
    # What each Windows node's era starts: its runtime and the kubelet as services, then flanneld and
    # kube-proxy as services (seed era) or as the recipe's HostProcess DaemonSets (containerd era).
    win_profiles = {n.box: cluster.profile(n.box) for n in cfg.nodes if cluster.profile(n.box).is_windows}
    chains = sorted({f"{p.container_runtime} -> kubelet" + (
        "; flanneld and kube-proxy as HostProcess DaemonSets" if identities.runs_hostprocess(p) else " -> flanneld -> kube-proxy")
        for p in win_profiles.values()})
    windows_chain = f" ({'; '.join(chains)})" if chains else ""
    windows_manifests = ("Windows node HostProcess DaemonSets" if any(identities.runs_hostprocess(p) for p in win_profiles.values())
                         else "Windows kube-proxy RBAC")
    nics = (libvirt_network.nics_plan(cfg) if cfg.host.provider == "libvirt" else
            f"management NIC on '{cfg.hyperv.management_switch}', cluster NIC on '{cfg.hyperv.cluster_switch}'")
    steps = [
        "\n   ".join(network_up_lines(cluster)),
        f"vagrant up {' '.join(n.name for n in cfg.nodes)} ({nics})",
        "static cluster IPs: " + ", ".join(f"{n.name}={n.ip}" for n in cfg.nodes),
        f"kubeadm init on {cfg.master.name} with {out / 'kubeadm'}",
        f"apply Flannel ({net.backend}), Linux node selector on kube-proxy, {windows_manifests}; wait for {cfg.master.name} Ready",
        f"join Linux workers: {', '.join(workers_linux) or 'none'}",
        f"join Windows workers: {', '.join(workers_win) or 'none'}{windows_chain}; each join gets its own token "
        "(kubeadm token create --ttl 1h), deleted as soon as its node is Ready",
        f"wait for every node Ready (timeout {cfg.cluster.ready_timeout} s), deploy the demo, write {out / 'kubeconfig'}",
    ]
    for i, text in enumerate(steps, 1):
        ui.say(f"{i}. {text}")
