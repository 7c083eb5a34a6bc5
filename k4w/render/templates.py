"""Rendered templates: every artifact of one validated config, in memory ({path relative to OUT:
text}); nothing here writes.

Templates are found by convention (docs/internals.md): a new template file is rendered without
touching this module.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import jinja2

from k4w.derive import cluster_nic, control_plane, identities, node_marks, winrm_scope
from k4w.derive.cluster import Cluster
from k4w.derive.step_env import secret_env_name, step_env
from k4w.infra import packer_cli, packer_hcl, pinned_tools
from k4w.infra.errors import K4wError
from k4w.media import build_media, iso
from k4w.model import kubeadm_timeouts, profiles
from k4w.render import packer_http
from . import escape, hostprocess
from .secrets import PLACEHOLDER_SECRETS, box_user_secrets_path


def environment(templates: Path) -> jinja2.Environment:
    """The Jinja environment every template renders in (and that validate's quoting rules parse with)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates)),
        # Packer ({{ .HTTPIP }}) and Go templates use {{ }}; ours must not collide.
        variable_start_string="<<",
        variable_end_string=">>",
        block_start_string="<%",
        block_end_string="%>",
        comment_start_string="<#",
        comment_end_string="#>",
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters.update(escape.FILTERS)
    env.globals["fail"] = _fail
    env.globals["secret_env"] = secret_env_name
    env.globals["has_template"] = lambda name: _has_template(env, name)
    return env


def _has_template(env: jinja2.Environment, name: str) -> bool:
    """Whether a template exists: a template that includes the file a profile names (an era's
    variant) checks it first, so a wrong name fails naming the profile key, not a loader error."""
    try:
        env.loader.get_source(env, name)
    except jinja2.TemplateNotFound:
        return False
    return True


def _fail(message: str) -> None:
    """Templates call << fail("why") >> to refuse a profile/config they cannot render."""
    raise K4wError(message)


def _paths(cluster: Cluster, out: Path, box: str | None) -> dict:
    """The paths a Packer template names, each written from the template's own folder
    (packer_hcl.PATH_ROOT: Packer's path.root, OUT/packer/), never from the checkout or --out as
    absolute paths, so the rendered folder can be moved or handed on and still validates and builds
    where it lands. The checkout's guest/ and vagrant/ files a template names ship beside it, in
    OUT/packer/guest/ and OUT/packer/vagrant/ (shipped_sources)."""
    repo = cluster.sources
    base = out / packer_hcl.rel_path("x").rsplit("/", 1)[0]

    def from_root(path: Path) -> str:
        # A path that shares no folder with --out but the drive's root (an ISO folder when --out
        # is elsewhere) stays absolute: a climb to the root would name the same folders, less legibly.
        if Path(os.path.commonpath([path, base])) == Path(path.anchor):
            return str(path)
        return packer_hcl.PATH_ROOT + "/" + Path(os.path.relpath(path, base)).as_posix()

    paths = {
        "out": from_root(out),
        "guest": packer_hcl.PATH_ROOT + "/" + SHIPPED["guest"],
        "vagrant": packer_hcl.PATH_ROOT + "/" + SHIPPED["vagrant"],
        "boxes": from_root(out / "boxes"),
        "logs": from_root(out / "logs"),
        "http": from_root(out / "http" / box) if box else None,
        "http_served": None,
        "iso": None,
        "iso_sha256": None,
        "direct_boot": None,
        "virtio_win": None,
    }
    if box:
        prof = cluster.profile(box)
        if direct_boot(prof) is not None:
            paths["direct_boot"] = packer_hcl.PATH_ROOT + "/" + direct_boot_rel(box).split("/", 1)[1]
        paths["http_served"] = from_root(build_media.served_folder(out, prof))
        # The ISO does not ship (gigabytes, and a Windows ISO may not be handed on): named by the
        # way from the template to iso/, which holds for the default --out build inside the checkout.
        paths["iso"] = from_root(iso.iso_path(prof))
        paths["iso_sha256"] = iso.iso_sha256(prof)
        # The virtio-win ISO a Windows box's libvirt bake attaches (iso/, recorded by iso-add like the ISO).
        if prof.data.get("virtio_win"):
            paths["virtio_win"] = from_root(iso.virtio_win_path(prof))
    return paths


# The checkout's folders whose files a Packer template names, by the folder of OUT/packer/ they are
# copied to, so the template names them ${path.root}/guest/..., ${path.root}/vagrant/....
SHIPPED = {"guest": "guest", "vagrant": "vagrant"}


def shipped_sources(template_text: str, name: str, repo) -> dict[str, str]:
    """The files of the checkout a rendered Packer template names (folders whole), as rendered
    files under packer/: what `packer validate` and `packer build` read besides the template."""
    files: dict[str, str] = {}
    parsed = packer_hcl.parse(template_text, name)
    prefix = packer_hcl.PATH_ROOT_EXPR + "/"
    for text in _strings([parsed["builders"], parsed["provisioners"], parsed["post-processors"]]):
        if not text.startswith(prefix):
            continue
        rel = text[len(prefix):]
        top = rel.split("/", 1)[0]
        if top not in SHIPPED.values():
            continue
        source = repo.root / rel.rstrip("/")
        if source.is_dir():
            found = sorted(p for p in source.rglob("*") if p.is_file())
        elif source.is_file():
            found = [source]
        else:
            raise K4wError(f"{name} names {rel}, which is not in the checkout ({source})")
        for path in found:
            files[f"packer/{path.relative_to(repo.root).as_posix()}"] = path.read_bytes().decode("utf-8")
    return files


def _strings(value) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def cluster_json(cluster: Cluster, out: Path) -> dict:
    """What the static vagrant/Vagrantfile reads. Plain data, no Ruby is generated."""
    cfg, net = cluster.config, cluster.network
    machines = []
    for node in cfg.nodes:
        prof = cluster.profile(node.box)
        machines.append(
            {
                "name": node.name,
                "vmname": f"{cfg.cluster.name}-{node.name}",
                "role": node.role,
                "box": node.box,
                "box_catalogue": str(out / "boxes" / f"{node.box}.json"),
                "os": prof.data.node_os,
                "ip": str(node.ip),
                "cpus": node.cpus,
                "memory": node.memory,
            }
        )
    data = {
        "cluster": cfg.cluster.name,
        "management_switch": cfg.hyperv.management_switch,
        "cluster_switch": cfg.hyperv.cluster_switch,
        "node_cidr": net.node_cidr,
        "prefix_length": net.node_prefixlen,
        "gateway": net.gateway,
        "dns_ip": net.dns_ip,
        # Where Vagrant reads the Windows box user's password (never in this file itself).
        "box_user_secrets": str(box_user_secrets_path(out)),
        "machines": machines,
    }
    # Only for libvirt, so a Hyper-V cluster.json stays exactly what it was (tests/render/test_hyperv_unchanged.py).
    return libvirt_cluster_json(cluster, data) if cfg.host.provider == "libvirt" else data


# vagrant-libvirt's `driver` (the domain type) per libvirt.accelerator: QEMU's emulation is the domain type
# "qemu", hardware virtualization "kvm" (vagrant-libvirt 0.11.2 (e0b17b34) lib/vagrant-libvirt/config.rb
# defaults it to "kvm"; libvirt formatdomain.html "type" attribute of <domain>).
LIBVIRT_DRIVER = {"kvm": "kvm", "tcg": "qemu"}


def libvirt_cluster_json(cluster: Cluster, data: dict) -> dict:
    """cluster.json for host.provider libvirt: without the Hyper-V switches, with the libvirt connection and
    networks, and each machine's cluster NIC MAC, which is in the domain definition from creation (no host
    script attaches it later, as host/cluster-nic.ps1 does on Hyper-V)."""
    cfg, lv = cluster.config, cluster.config.libvirt
    data = {k: v for k, v in data.items() if k not in ("management_switch", "cluster_switch")}
    for machine in data["machines"]:
        machine["cluster_mac"] = cluster_nic.mac_with(cluster_nic.cluster_nic_mac(cfg.cluster.name, machine["name"]), ":")
    data["provider"] = "libvirt"
    data["libvirt"] = {
        "uri": lv.uri,
        "storage_pool": lv.storage_pool,
        "driver": LIBVIRT_DRIVER[lv.accelerator],
        "management_network": lv.management_network,
        "management_cidr": str(lv.management_cidr),
        "management_forward": lv.management_forward,
        "cluster_network": lv.cluster_network,
    }
    if lv.accelerator == "tcg":
        # The emulated CPU of every k4w guest (control_plane.qemu_cpu), by libvirt's feature names.
        data["libvirt"]["cpu_model"] = control_plane.TCG_CPU_MODEL
        data["libvirt"]["cpu_features"] = control_plane.libvirt_cpu_features()
    return data


# The file beside a directly booted box's kernel and initrd (vagrant/box/ubuntu.Vagrantfile reads it): their
# file names in the box and the kernel command line. Packer's vagrant post-processor copies each `include`
# file into the box under its own base name (hashicorp/packer-plugin-vagrant v1.0.3 (abbce8c4)
# post-processor/vagrant/post-processor.go: filepath.Join(dir, filepath.Base(src))).
DIRECT_BOOT_FILE = "k4w-direct-boot.json"
# What the post-processor itself writes into a box (post-processor.go: the Vagrantfile and metadata.json;
# libvirt.go: box.img): an included file of one of these names would be overwritten or overwrite it.
BOX_OWN_FILES = ("Vagrantfile", "metadata.json", "box.img")


def direct_boot(prof: profiles.Profile) -> dict | None:
    """For a box whose image has no bootloader (build.qemu.kernel: QEMU boots the kernel itself, as the CI
    e2e boxes do), what a libvirt domain made from the box needs to boot it the same way: the base names
    of the kernel and initrd the box carries, and the command line. None for a box that boots itself."""
    build = prof.data.get("build") or {}
    q = build.get("qemu") or {}
    if build.get("builder") != "qemu" or not q.get("kernel"):
        return None
    files = {"kernel": Path(q["kernel"]).name, **({"initrd": Path(q["initrd"]).name} if q.get("initrd") else {})}
    names = list(files.values()) + [DIRECT_BOOT_FILE]
    clash = sorted({n for n in names if names.count(n) > 1 or n in BOX_OWN_FILES})
    if clash:
        raise K4wError(f"{prof.path}: build.qemu kernel/initrd file names {', '.join(clash)} would collide in the box "
                       f"(each is copied into it under its base name, beside {', '.join(BOX_OWN_FILES)} and {DIRECT_BOOT_FILE})")
    return {**files, "cmd_line": q.get("append", "")}


def direct_boot_rel(box: str) -> str:
    """Where render writes a box's DIRECT_BOOT_FILE, relative to OUT (inside OUT/packer/, which ships whole)."""
    return f"packer/direct-boot/{box}/{DIRECT_BOOT_FILE}"


def http_templates(templates: Path, prof: profiles.Profile) -> list[Path]:
    """The templates rendered to OUT/http/<box>/ for one box (docs/internals.md): those of its
    family for every box, plus those of its installer kind only, so a box never carries the
    answer files of an installer it does not run."""
    family = templates / "http" / prof.os_family
    found = sorted(family.glob("*.j2"))
    kind = prof.installer_kind
    if kind is not None:
        folder = family / kind
        if not folder.is_dir() or not any(folder.glob("*.j2")):
            known = ", ".join(sorted(d.name for d in family.iterdir() if d.is_dir())) if family.is_dir() else ""
            raise K4wError(f"{prof.path}: installer.kind {kind!r} has no templates in templates/http/{prof.os_family}/{kind}/ "
                           f"(known kinds: {known or 'none'})")
        found += sorted(folder.glob("*.j2"))
    return found


# A cluster k4w did not make (cluster.existing) has its own CNI: k4w neither renders nor applies Flannel's
# manifest there (k4w/cluster/existing.py reads the cluster's Flannel config instead).
NOT_FOR_EXISTING = ("kube-flannel.yaml",)


def render_files(cluster: Cluster, out: Path, secrets_for=None) -> dict[str, str]:
    """Render every artifact in memory: {path relative to out: text}. Writes nothing.

    secrets_for(box) gives a box's secrets; None means placeholders (for stamps, dry runs and tests).
    """
    out = Path(out).resolve()
    cfg = cluster.config
    templates = cluster.sources.templates
    env = environment(templates)
    base = {"cfg": cfg, "emulated_cpu": control_plane.qemu_cpu(), "uefi_firmware": packer_cli.UEFI_FIRMWARE, "net": cluster.network, "proxy": cluster.proxy, "kube": cluster.kube,
            "windows_demo_image": cluster.windows_demo_image,
            "windows_nanoserver_image": cluster.windows_nanoserver_image,
            "kubeadm_timeouts": kubeadm_timeouts.rendered(cfg.cluster.ready_timeout, emulated_cpu=cluster.emulated_cpu),
            # None unless the master runs on an emulated CPU (k4w.derive.control_plane).
            "control_plane": cluster.control_plane,
            "marks": node_marks,
            "windows_identities": {i.component: i for i in identities.WINDOWS_COMPONENTS},
            "winrm_remote_scope": winrm_scope.remote_scope(cfg.hyperv.management_switch),
            "packer_http": {"port_min": packer_http.PORT_MIN, "port_max": packer_http.PORT_MAX},
            "packer_plugins": pinned_tools.packer_pins()}
    files: dict[str, str] = {}

    def emit(template: Path, target: str, **extra) -> None:
        rel = template.relative_to(templates).as_posix()
        context = {"box": None, "node": None, "paths": _paths(cluster, out, None), "secrets": PLACEHOLDER_SECRETS}
        context.update(base)
        context.update(extra)
        try:
            files[target] = env.get_template(rel).render(**context)
        except K4wError as exc:
            raise K4wError(f"template {rel}: {exc}") from exc
        except jinja2.TemplateError as exc:
            line = getattr(exc, "lineno", None)
            raise K4wError(f"template {rel}{f' line {line}' if line else ''}: {exc}") from exc

    for box_name, prof in cluster.profiles.items():
        box = profiles.Attr(prof.data)
        box["name"] = box_name
        extra = {
            "box": box,
            "paths": _paths(cluster, out, box_name),
            "secrets": secrets_for(box_name) if secrets_for else PLACEHOLDER_SECRETS,
            "step_env": step_env(prof, cluster),
        }
        extra["packer_env"] = packer_hcl.environment_locals(extra["step_env"].environment_vars)
        packer_template = templates / "packer" / f"{prof.os_family}{packer_hcl.SUFFIX}.j2"
        if not packer_template.is_file():
            raise K4wError(f"box {box_name}: no Packer template templates/packer/{prof.os_family}{packer_hcl.SUFFIX}.j2 "
                           f"for os_family '{prof.os_family}'")
        # Found first: an unknown installer kind is reported as such, not as a missing Packer partial.
        installer_templates = http_templates(templates, prof)
        emit(packer_template, packer_hcl.rel_path(box_name), **extra)
        files.update(shipped_sources(files[packer_hcl.rel_path(box_name)], packer_hcl.rel_path(box_name), cluster.sources))
        boot = direct_boot(prof)
        if boot is not None:
            files[direct_boot_rel(box_name)] = json.dumps(boot, indent=2) + "\n"
        for tpl in installer_templates:
            emit(tpl, f"http/{box_name}/{tpl.stem}", **extra)

    for tpl in sorted((templates / "manifests").glob("*.yaml.j2")):
        if tpl.name == identities.SERVICE_IDENTITIES_TEMPLATE and not identities.service_identities_needed(
                [cluster.profile(n.box) for n in cfg.nodes]):
            continue
        if not (cfg.joins_existing and tpl.stem in NOT_FOR_EXISTING):
            emit(tpl, f"manifests/{tpl.stem}")
    # The patches change kubeadm's own DaemonSets, which k4w leaves alone in a cluster it did not make.
    for tpl in [] if cfg.joins_existing else sorted((templates / "manifests" / "patches").glob("*.j2")):
        emit(tpl, f"manifests/patches/{tpl.stem}")
    # A Windows node recipe's own manifests (templates/manifests/windows-<recipe>/, e.g. the containerd
    # era's HostProcess DaemonSets), only when a node uses that recipe; an existing cluster gets them
    # too (k4w/cluster/existing.py applies them as the objects its Windows workers need).
    for folder, recipe_profs in hostprocess.recipe_profiles(cluster).items():
        recipe_box = profiles.Attr(recipe_profs[0].data)
        for tpl in sorted((templates / "manifests" / folder).glob("*.yaml.j2")):
            emit(tpl, f"manifests/{folder}/{tpl.stem}", box=recipe_box,
                 hostprocess=hostprocess.context(cluster, folder, recipe_profs, cluster.sources.guest))
    # An existing cluster was initialised by its own tool: no kubeadm init config (k4w/cluster/existing.py).
    for tpl in [] if cfg.joins_existing else sorted((templates / "kubeadm").glob("*.j2")):
        emit(tpl, f"kubeadm/{tpl.stem}")
    # kubeadm's patches of its static Pods, for an emulated CPU only: the kubeadm config names their folder
    # then, and a Hyper-V or KVM master's config stays as it was.
    for tpl in sorted((templates / "kubeadm" / "patches").glob("*.j2")) if base["control_plane"] else []:
        emit(tpl, f"{control_plane.PATCHES_OUT_DIR}/{tpl.stem}")
    for node in cfg.nodes:
        prof = cluster.profile(node.box)
        recipe = templates / "nodes" / prof.node_templates
        if prof.node_recipe and not recipe.is_dir():
            raise K4wError(f"box {node.box}: no node recipe templates/nodes/{prof.node_templates}/ "
                           f"(node_recipe {prof.node_recipe!r} in {prof.path.name})")
        for tpl in sorted(recipe.glob("*.j2")):
            box = profiles.Attr(prof.data)
            box["name"] = node.box
            emit(tpl, f"nodes/{node.name}/{tpl.stem}", node=node, box=box, paths=_paths(cluster, out, node.box))

    files["vagrant/cluster.json"] = json.dumps(cluster_json(cluster, out), indent=2) + "\n"
    return files
