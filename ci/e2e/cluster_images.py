"""The images of `invoke e2e --cluster`, built on the host from the pinned tools: no registry is reachable.

Which images: exactly the names `kubeadm config images list --config <rendered kubeadm config>` prints
(the pinned kubeadm reading our config) plus every image of the rendered Flannel manifest. A name no
recipe knows, or a tag that is not the version the recipe's tool was built at, fails the run: an image
must never be imported under a name whose content is something else.

Where the files go, as the upstream images have them, because the manifests rely on it:
- kube-apiserver, -controller-manager, -scheduler: /usr/local/bin/<name>; kubeadm's static pods call
  them by name (k8s.io/kubernetes@v1.37.2 cmd/kubeadm/app/phases/controlplane/manifests.go, `command :=
  []string{"kube-apiserver"}`), so the image's PATH must reach /usr/local/bin.
- kube-proxy: /usr/local/bin/kube-proxy (same release, cmd/kubeadm/app/phases/addons/proxy/manifests.go
  runs `/usr/local/bin/kube-proxy`), with iptables and conntrack, which it runs.
- etcd: /usr/local/bin/etcd (cmd/kubeadm/app/phases/etcd/local.go: `command := []string{"etcd"}`).
- CoreDNS: /coredns as the entrypoint (kubeadm's Deployment gives only `args: ["-conf", ...]`,
  cmd/kubeadm/app/phases/addons/dns/manifests.go).
- pause: /pause as the entrypoint, as user 65535:65535 (k8s.io/kubernetes@v1.37.2 build/pause/Dockerfile).
- flannel: /opt/bin/flanneld (entrypoint) and /opt/bin/install-conf, with iptables
  (flannel-io/flannel@v0.28.10 images/Dockerfile); the manifest's install-cni init
  container runs /opt/bin/install-conf (Documentation/kube-flannel.yml at that tag).
- flannel-cni-plugin: /flannel and a `cp` (the manifest's init container runs `cp -f /flannel ...`).
  Its binary is a SUBSTITUTE (tools/lock.yml flannel-cni-plugin): reported under `substitutes`.

Host programs (iptables, conntrack, busybox for cp) go in with the shared libraries `ldd` names and,
for iptables, its extension modules, which it loads with dlopen (ldd cannot see those).
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from k4w.infra import pinned_tools
from .oci_archive import Entry, Image, write
from .phases import E2EError

BUILD_HINT = "scripts/build-tools --group cluster"
# Debian 12's iptables-nft: one multi-call binary (iptables package, /usr/sbin/xtables-nft-multi) that
# dispatches on its name, and the extension modules it dlopens from its compiled-in XTABLES_LIBDIR.
XTABLES_MULTI = "xtables-nft-multi"
XTABLES_NAMES = ("iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore")
XTABLES_LIBDIR = Path("/usr/lib/x86_64-linux-gnu/xtables")
# Host programs an image needs, and the Debian package that brings each (the error names it).
HOST_PACKAGES = {XTABLES_MULTI: "iptables", "conntrack": "conntrack", "busybox": "busybox"}
SBIN = "/usr/local/sbin:/usr/sbin:/sbin:/usr/local/bin:/usr/bin:/bin"


@dataclass
class Built:
    """One archive written for the guest."""

    name: str
    archive: Path
    sha256: str
    bytes: int
    made_from: dict[str, str] = field(default_factory=dict)   # image path -> where its content came from


# ------------------------------------------------------------------ which images


def kubeadm_images(config: Path) -> list[str]:
    """`kubeadm config images list --config CONFIG` with the pinned kubeadm: the names kubeadm init pulls."""
    kubeadm = pinned_tools.binary("kubernetes-node", "kubeadm")
    if kubeadm is None:
        raise E2EError(f"no pinned kubeadm in {pinned_tools.tool_dir('kubernetes-node')}: run scripts/build-tools")
    done = subprocess.run([str(kubeadm), "config", "images", "list", "--config", str(config)],
                          capture_output=True, text=True, timeout=120, check=False)
    names = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    if done.returncode != 0 or not names:
        raise E2EError(f"kubeadm config images list --config {config} failed (exit {done.returncode}):\n"
                       f"{done.stderr.strip() or done.stdout.strip()}")
    return names


def manifest_images(manifest: Path) -> list[str]:
    """Every image a pod of the rendered manifest runs (containers and init containers), in order."""
    names: list[str] = []
    for document in yaml.safe_load_all(manifest.read_text(encoding="utf-8")):
        pod = ((document or {}).get("spec") or {}).get("template", {}).get("spec") or {}
        for container in [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]:
            if container["image"] not in names:
                names.append(container["image"])
    return names


def required(rendered: Path) -> list[str]:
    """The images the cluster run needs, from OUT's rendered kubeadm config and Flannel manifest."""
    names = kubeadm_images(rendered / "kubeadm" / "kubeadm-config.yaml")
    return names + [n for n in manifest_images(rendered / "manifests" / "kube-flannel.yaml") if n not in names]


# ------------------------------------------------------------------ recipes


@dataclass(frozen=True)
class Recipe:
    tool: str                                # tools/lock.yml entry whose version the image's tag carries
    programs: dict[str, tuple[str, str]]     # image path -> (lock entry, program it built)
    entrypoint: tuple[str, ...] = ()
    host: tuple[str, ...] = ()               # host programs (with their libraries) the image needs
    substitute: bool = False                 # the tool stands in for another project's release
    user: str = ""                           # the image's USER, where upstream's sets one

    def tag_matches(self, tag: str, version: str) -> bool:
        if tag.lstrip("v") == version.lstrip("v"):  # pause's lock version is v3.10.2, its tag 3.10.2
            return True
        # etcd's tag adds an image revision to etcd's version (kubeadm DefaultEtcdVersion "3.7.0-0").
        return self.tool == "etcd" and tag.lstrip("v").split("-")[0] == version.lstrip("v")


def _control_plane(name: str, host: tuple[str, ...] = ()) -> Recipe:
    return Recipe("kubernetes-control-plane", {f"/usr/local/bin/{name}": ("kubernetes-control-plane", name)}, host=host)


RECIPES = {
    "kube-apiserver": _control_plane("kube-apiserver"),
    "kube-controller-manager": _control_plane("kube-controller-manager"),
    "kube-scheduler": _control_plane("kube-scheduler"),
    "kube-proxy": _control_plane("kube-proxy", host=(XTABLES_MULTI, "conntrack")),
    "etcd": Recipe("etcd", {"/usr/local/bin/etcd": ("etcd", "etcd")}),
    "coredns": Recipe("coredns", {"/coredns": ("coredns", "coredns")}, entrypoint=("/coredns",)),
    "pause": Recipe("pause", {"/pause": ("pause", "pause")}, entrypoint=("/pause",), user="65535:65535"),
    "flannel": Recipe("flanneld", {"/opt/bin/flanneld": ("flanneld", "flanneld"),
                                   "/opt/bin/install-conf": ("flannel-install-conf", "install-conf")},
                      entrypoint=("/opt/bin/flanneld",), host=(XTABLES_MULTI,)),
    "flannel-cni-plugin": Recipe("flannel-cni-plugin", {"/flannel": ("flannel-cni-plugin", "flannel")},
                                 host=("busybox",), substitute=True),
}


def split(name: str) -> tuple[str, str]:
    """(repository's last path element, tag) of an image name: registry.k8s.io/coredns/coredns:v1.14.6 -> coredns, v1.14.6."""
    repository, _, tag = name.rpartition(":")
    if not repository or "/" in tag:
        raise E2EError(f"image {name!r} has no tag")
    return repository.rsplit("/", 1)[-1], tag


def recipe_for(name: str) -> Recipe:
    base, _ = split(name)
    if base not in RECIPES:
        raise E2EError(f"no recipe builds the image {name}: ci/e2e/cluster_images.py RECIPES knows "
                       f"{', '.join(sorted(RECIPES))}")
    return RECIPES[base]


def tool_version(tool: str) -> str:
    """The version a tool's image tag carries: a C program's own (pause's c_version), else the module's."""
    entry = pinned_tools.lock()[tool]
    return entry.get("c_version") or entry["version"]


def check_names(names: list[str]) -> dict[str, dict]:
    """Every name has a recipe whose tool is at the name's tag. Returns the substitutes:
    {image name: {tool, module, version}} for the report."""
    problems, substitutes = [], {}
    for name in names:
        recipe = recipe_for(name)
        _, tag = split(name)
        version = tool_version(recipe.tool)
        if recipe.substitute:
            entry = pinned_tools.lock()[recipe.tool]
            substitutes[name] = {"tool": recipe.tool, "module": entry["module"], "version": version}
        elif not recipe.tag_matches(tag, version):
            problems.append(f"{name}: the pinned {recipe.tool} is {version} (tools/lock.yml), not {tag}")
    if problems:
        raise E2EError("the images the cluster needs are not the versions the pinned tools build:\n  " + "\n  ".join(problems))
    return substitutes


# ------------------------------------------------------------------ files


def _not_installed(missing: list[str]) -> E2EError:
    return E2EError(f"{', '.join(missing)} not installed on this host; the cluster images need "
                    f"{'it' if len(missing) == 1 else 'them'}: sudo apt-get install "
                    + " ".join(sorted({HOST_PACKAGES.get(p, p) for p in missing})))


def _which(program: str) -> Path:
    found = shutil.which(program, path=SBIN)
    if not found:
        raise _not_installed([program])
    return Path(found)


def require_host_programs() -> None:
    """Every host program the cluster images carry, before the run's first phase: a missing one found only
    when the images are built costs the whole bake first (a fresh host's libvirt run stopped there after 17
    minutes for want of conntrack)."""
    if missing := [program for program in HOST_PACKAGES if not shutil.which(program, path=SBIN)]:
        raise _not_installed(missing)


def libraries(binary: Path) -> list[str]:
    """The shared libraries (and the loader) binary loads, as the paths ldd resolves; none when static."""
    done = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0 or "not a dynamic executable" in done.stdout + done.stderr:
        return []
    found = []
    for line in done.stdout.splitlines():
        match = re.search(r"(?:=>\s*)?(/\S+)\s+\(0x", line)
        if match:
            found.append(match.group(1))
        elif "not found" in line:
            raise E2EError(f"ldd {binary}: {line.strip()}")
    return found


def _with_libraries(path: str, source: Path, entries: dict[str, Entry]) -> None:
    entries[path] = Entry(path, source=source)
    for lib in libraries(source):
        entries.setdefault(lib, Entry(lib, source=Path(lib), mode=0o755))


# Where each host program goes in an image (its Debian path), and the names that link to it.
HOST_PROGRAMS = {
    XTABLES_MULTI: (f"/usr/sbin/{XTABLES_MULTI}", tuple(f"/usr/sbin/{name}" for name in XTABLES_NAMES)),
    "conntrack": ("/usr/sbin/conntrack", ()),
    "busybox": ("/bin/busybox", ("/bin/cp",)),
}


def host_paths(program: str) -> set[str]:
    """The paths a host program takes in an image, without looking at the host (for the checks)."""
    path, links = HOST_PROGRAMS[program]
    return {path, *links}


def host_entries(program: str) -> dict[str, Entry]:
    """A host program at its Debian path with the names that link to it, its libraries, and for
    iptables the extension modules it loads."""
    path, links = HOST_PROGRAMS[program]
    entries: dict[str, Entry] = {}
    _with_libraries(path, _which(program).resolve(), entries)
    for link in links:
        entries[link] = Entry(link, link=Path(path).name)
    if program == XTABLES_MULTI:
        if not XTABLES_LIBDIR.is_dir():
            raise E2EError(f"{XTABLES_LIBDIR} is missing: iptables cannot load its extensions (sudo apt-get install iptables)")
        for module in sorted(XTABLES_LIBDIR.glob("*.so")):
            _with_libraries(str(module), module.resolve(), entries)
    return entries


def _program(tool: str, program: str) -> Path:
    binary = pinned_tools.binary(tool, program)
    if binary is None:
        raise E2EError(f"{tool} {tool_version(tool)} ({program}) is not built in {pinned_tools.tool_dir(tool)}: run {BUILD_HINT}")
    return binary


def missing_tools(names: list[str]) -> list[str]:
    """The lock entries of the cluster images that are not built yet."""
    missing = []
    for name in names:
        for tool, program in recipe_for(name).programs.values():
            if pinned_tools.binary(tool, program) is None and tool not in missing:
                missing.append(tool)
    return missing


def image(name: str) -> tuple[Image, dict[str, str]]:
    """The Image of name, and where each of its files came from."""
    recipe = recipe_for(name)
    entries: dict[str, Entry] = {}
    origin: dict[str, str] = {}
    for path, (tool, program) in recipe.programs.items():
        source = _program(tool, program)
        _with_libraries(path, source, entries)
        origin[path] = str(source)
    for program in recipe.host:
        found = host_entries(program)
        entries.update({p: e for p, e in found.items() if p not in entries})
        origin.update({p: f"host {e.source}" for p, e in found.items() if e.source and p not in origin})
    return Image(name=name, entries=list(entries.values()), entrypoint=list(recipe.entrypoint), user=recipe.user), origin


def archive_name(name: str) -> str:
    """A file name for an image name: registry.k8s.io/etcd:3.7.0-0 -> registry.k8s.io_etcd_3.7.0-0.tar."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name) + ".tar"


def build(names: list[str], dest: Path) -> list[Built]:
    """Write one archive per image name into dest (stale archives of other names removed)."""
    missing = missing_tools(names)
    if missing:
        raise E2EError(f"the cluster images need tools that are not built: {', '.join(missing)}: run {BUILD_HINT}")
    dest.mkdir(parents=True, exist_ok=True)
    built = []
    for name in names:
        img, origin = image(name)
        archive = dest / archive_name(name)
        write(archive, img)
        digest = hashlib.sha256(archive.read_bytes()).hexdigest()
        built.append(Built(name=name, archive=archive, sha256=digest, bytes=archive.stat().st_size, made_from=origin))
    keep = {b.archive.name for b in built}
    for stale in dest.glob("*.tar"):
        if stale.name not in keep:
            stale.unlink()
    return built
