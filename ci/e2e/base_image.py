"""The e2e base images: a distribution installed by debootstrap into a raw ext4 disk, plus its kernel.

Each stands in for what a box's installer leaves before Packer's provisioners run: a bootable
system with sshd, a `vagrant`/`vagrant` user with passwordless sudo (the preseed's late_command
and the autoinstall's identity do the same), DHCP on the NIC. Two recipes (RECIPES), chosen by the
e2e box profile's `ci_base_image`:
- debian-12: Debian 12 with Debian's kernel. An installer run cannot happen in CI: the Debian
  mirror reachable there serves .deb files but not the installer's .udeb files.
- ubuntu-2604: Ubuntu 26.04 itself, from archive.ubuntu.com, with Ubuntu's own kernel and what its
  server install brings that the guest steps meet (sudo-rs as sudo, the Rust coreutils, netplan,
  systemd-resolved, dracut), plus the Hyper-V packages the ubuntu-2604 autoinstall seed installs.
  The live installer itself cannot run here: releases.ubuntu.com (the ISO) is unreachable.

The disk is made without loop mounts (`mkfs.ext4 -d` copies the tree into the image), with
the file system on the whole disk (no partition table), so QEMU boots it directly with the
extracted kernel and initrd: `-kernel vmlinuz -initrd initrd.img -append "root=/dev/vda ..."`.

Cached under OUT/base-image/<key>/, the key being a hash of the recipe and this file; a link named
after the recipe (OUT/base-image/debian-12, .../ubuntu-2604) points at the entry the e2e profiles use.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from .phases import E2EError, Log, Phase, PhaseTimeout, run

# Packages both recipes install on top of debootstrap's minbase (only Essential + apt); everything
# else is named, so the image holds what a box needs and the key changes when the list does.
VARIANT = "minbase"
COMMON_PACKAGES = (
    "systemd",
    "systemd-sysv",  # /sbin/init
    "udev",
    "dbus",  # systemctl as a non-root user (the box spec runs as vagrant) talks over D-Bus
    "openssh-server",  # Packer's and the spec's way in
    "sudo",  # Packer runs each step through `sudo -S`; the spec checks passwordless sudo
    "ca-certificates",
    "curl",  # the guest steps' downloads
    "gnupg",  # 03-docker verifies Docker's key on Ubuntu; kept so every image has the same tools
    "procps",  # sysctl (02-kernel, the spec)
    "kmod",  # modprobe (02-kernel)
    "e2fsprogs",  # fsck of the root file system at boot
)
DISK_SIZE = "3G"  # the e2e profiles' build.disk_gb must equal their recipe's disk_size
ROOT_LABEL = "k4w-root"
HOSTNAME = "k4w-e2e"
BOX_USER = "vagrant"  # Vagrant's box convention: user vagrant, password vagrant
# QEMU user-mode networking answers DNS on 10.0.2.3 (QEMU docs, "Network options", -netdev user).
QEMU_USER_NET_DNS = "10.0.2.3"

# The kernel's names for a virtio NIC: predictable (ens3, enp0s3) or, with net.ifnames=0, eth0.
NIC_NAME_GLOBS = ("en*", "eth*")
NIC_NETWORK_FILE = "etc/systemd/network/10-k4w-dhcp.network"
# Ubuntu's recipe: the management NIC by DHCP in netplan, as the installer writes it (50-cloud-init.yaml,
# which cluster-ip.sh's 60-k4w-cluster.yaml is read after). netplan renders it for systemd-networkd.
NETPLAN_FILE = "etc/netplan/50-cloud-init.yaml"

DISK, KERNEL, INITRD, MANIFEST = "disk.raw", "vmlinuz", "initrd.img", "manifest.json"
KEYS = Path(__file__).resolve().parent / "keys"

# Files both recipes write into the installed tree (path relative to its root, mode, content).
COMMON_FILES = (
    ("etc/hostname", 0o644, f"{HOSTNAME}\n"),
    # sudo resolves the host name on every call; without this line it warns each time.
    ("etc/hosts", 0o644, f"127.0.0.1\tlocalhost\n127.0.1.1\t{HOSTNAME}\n::1\tlocalhost ip6-localhost ip6-loopback\n"),
    ("etc/fstab", 0o644, "# k4w e2e base image: one ext4 file system on the whole virtio disk\n"
                          "/dev/vda\t/\text4\terrors=remount-ro\t0\t1\n"),
    # The same sudoers line the preseed's late_command writes.
    (f"etc/sudoers.d/{BOX_USER}", 0o440, f"{BOX_USER} ALL=(ALL) NOPASSWD: ALL\n"),
    # Empty: systemd writes a new machine id at first boot, so every guest has its own.
    ("etc/machine-id", 0o444, ""),
)
DEBIAN_FILES = (
    # DHCP on the guest's NIC only, matched by name as cloud images do. Not `Type=ether`: a pod's
    # veth, cni0 and flannel.1 are ether too, and networkd detaches every link it manages from a
    # master its .network does not name (systemd-stable@v252.31 src/network/networkd-setlink.c
    # link_request_to_set_master, commit 8c2b7214; Debian 12 runs 252), so pods lost the node.
    (NIC_NETWORK_FILE, 0o644, f"[Match]\nName={' '.join(NIC_NAME_GLOBS)}\n\n[Network]\nDHCP=ipv4\n"),
    # systemd-networkd hands DHCP's DNS only to systemd-resolved (not installed): name it here.
    ("etc/resolv.conf", 0o644, f"nameserver {QEMU_USER_NET_DNS}\n"),
)
UBUNTU_FILES = (
    # eth0 by DHCP, the shape subiquity writes for the NIC it installed over; the e2e profile boots with
    # net.ifnames=0, so the NIC is eth0 as on Hyper-V (hv_netvsc). The cluster NIC (eth1) is matched by
    # MAC in cluster-ip.sh's own file. netplan wants its files private (it warns on others' read access).
    (NETPLAN_FILE, 0o600, "network:\n  version: 2\n  ethernets:\n    eth0:\n      dhcp4: true\n"),
)
# Run inside the tree with chroot (no /proc needed): the box user and the network service.
COMMON_CHROOT = (
    ("create the box user", ["useradd", "--create-home", "--shell", "/bin/bash", "--groups", "sudo", BOX_USER]),
    ("enable systemd-networkd", ["systemctl", "enable", "systemd-networkd.service"]),
)
CLEAN = ("drop the downloaded .debs", ["apt-get", "clean"])


@dataclass(frozen=True)
class Recipe:
    """One distribution's base image: what debootstrap installs and what is written after."""

    name: str  # the link's name under the cache, and the profile's ci_base_image
    suite: str
    mirror: str
    packages: tuple[str, ...]
    files: tuple[tuple[str, int, str], ...]
    chroot: tuple[tuple[str, list[str]], ...]
    # debootstrap's --keyring (an armored key in KEYS, dearmored at build time); None: the host's
    # own keyring for that distribution (debian-archive-keyring).
    keyring: str | None = None
    key_fingerprint: str | None = None  # the one key that keyring must hold
    # debootstrap's script for the suite when this debootstrap predates it (Debian 12's 1.0.128 knows
    # no Ubuntu after 23.04; every Ubuntu suite since gutsy uses the same script).
    script: str | None = None
    disk_size: str = DISK_SIZE
    # The guest configures its NICs through netplan (Ubuntu), so cluster-up's own cluster-ip.sh can set
    # the node address; without it (Debian: networkd alone) the harness writes what netplan would.
    netplan: bool = False

    def recipe_json(self) -> dict:
        return {"name": self.name, "suite": self.suite, "mirror": self.mirror, "variant": VARIANT,
                "packages": sorted(self.packages), "disk": self.disk_size, "keyring": self.keyring, "key": self.key_fingerprint,
                "script": self.script, "netplan": self.netplan, "files": [[p, m, c] for p, m, c in self.files],
                "chroot": [c for _, c in self.chroot]}


DEBIAN_12 = Recipe(
    name="debian-12",
    suite="bookworm",
    mirror="http://deb.debian.org/debian",
    packages=("linux-image-amd64", *COMMON_PACKAGES),  # the kernel QEMU boots, with br_netfilter, overlay
    files=COMMON_FILES + DEBIAN_FILES,
    chroot=COMMON_CHROOT + (CLEAN,),
)
# The Ubuntu archive's signing key for 26.04: "Ubuntu Archive Automatic Signing Key (2018)",
# fingerprint below, as shipped in ubuntu-keyring 2023.11.28.1build1 (resolute main,
# etc/apt/trusted.gpg.d/ubuntu-keyring-2018-archive.gpg, sha256 5ebbeeb4...7e96; resolute's Release.gpg
# names this issuer). The armored copy in keys/ is that file; a test checks its fingerprint.
UBUNTU_ARCHIVE_2018_FINGERPRINT = "F6ECB3762474EDA9D21B7022871920D1991BC93C"
UBUNTU_2604 = Recipe(
    name="ubuntu-2604",
    suite="resolute",
    mirror="http://archive.ubuntu.com/ubuntu",
    packages=(
        # What a 26.04 server install has that the guest steps run into: ubuntu-minimal (sudo-rs as
        # sudo, coreutils from uutils, netplan.io, iproute2), systemd-resolved (ubuntu-server-minimal;
        # the kubelet then reads /run/systemd/resolve/resolv.conf), and dracut, 26.04's initramfs
        # generator (debootstrap installs no Recommends, so the kernel would get none).
        "ubuntu-minimal", "systemd-resolved", "dracut",
        # boxes/ubuntu-2604.yml installer.packages: the virtual kernel and its Hyper-V tools.
        "linux-image-virtual", "linux-tools-virtual", "linux-cloud-tools-virtual",
        *COMMON_PACKAGES,
    ),
    files=COMMON_FILES + UBUNTU_FILES,
    chroot=COMMON_CHROOT + (
        # dracut's kernel hook may have run before dracut itself was configured: make the initrd now,
        # generic (not host-only: the build host is not the guest), for the one installed kernel.
        ("make the initrd", ["sh", "-c", "dracut --force --no-hostonly /boot/initrd.img-$(ls /lib/modules) $(ls /lib/modules)"]),
        CLEAN,
    ),
    keyring="ubuntu-archive-2018.asc",
    key_fingerprint=UBUNTU_ARCHIVE_2018_FINGERPRINT,
    netplan=True,
    script="gutsy",
    disk_size="4G",
)
RECIPES = {r.name: r for r in (DEBIAN_12, UBUNTU_2604)}


def recipe_named(name: str) -> Recipe:
    try:
        return RECIPES[name]
    except KeyError:
        raise E2EError(f"no e2e base image recipe {name!r}; the recipes are: {', '.join(RECIPES)}") from None


@dataclass(frozen=True)
class BaseImage:
    folder: Path
    key: str
    reused: bool
    sha256: str  # of disk.raw, recorded when it was made

    @property
    def disk(self) -> Path:
        return self.folder / DISK

    @property
    def kernel(self) -> Path:
        return self.folder / KERNEL

    @property
    def initrd(self) -> Path:
        return self.folder / INITRD


def cache_key(recipe: Recipe = DEBIAN_12, source: bytes | None = None) -> str:
    """Hash of everything that shapes the image: the recipe (packages, suite, mirror, disk, files) and this file."""
    source = source if source is not None else Path(__file__).read_bytes()
    keyring = (KEYS / recipe.keyring).read_bytes() if recipe.keyring else b""
    shaped = {**recipe.recipe_json(), "source_sha256": hashlib.sha256(source).hexdigest(),
              "keyring_sha256": hashlib.sha256(keyring).hexdigest()}
    return hashlib.sha256(json.dumps(shaped, sort_keys=True).encode()).hexdigest()[:16]


def debootstrap_command(target: Path, recipe: Recipe = DEBIAN_12, keyring: Path | None = None) -> list[str]:
    """keyring: the dearmored recipe.keyring (made by _build); debootstrap then checks the suite's
    Release signature against that key alone."""
    cmd = ["debootstrap", f"--variant={VARIANT}", f"--include={','.join(recipe.packages)}"]
    if recipe.keyring:
        cmd.append(f"--keyring={keyring or '<' + recipe.keyring + ', dearmored>'}")
    cmd += [recipe.suite, str(target), recipe.mirror]
    if recipe.script:
        cmd.append(f"/usr/share/debootstrap/scripts/{recipe.script}")
    return cmd


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(8 * 1024 * 1024):
            digest.update(chunk)
    return digest.hexdigest()


def _complete(folder: Path) -> dict | None:
    """The manifest of a finished cache entry, None when it is incomplete."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    if all((folder / name).is_file() for name in (DISK, KERNEL, INITRD)):
        return manifest
    return None


def _mounts_under(path: Path) -> list[str]:
    """Mount points at or below path (debootstrap mounts /proc, /sys and maybe /dev there)."""
    prefix = str(path.resolve())
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        for line in fh:
            point = line.split()[4].replace("\\040", " ")
            if point == prefix or point.startswith(prefix + "/"):
                found.append(point)
    return sorted(found, key=len, reverse=True)


def remove_tree(path: Path, phase: Phase, log: Log) -> None:
    """Delete a build tree safely: unmount what debootstrap left, never cross into a mount."""
    if not path.exists():
        return
    for point in _mounts_under(path):
        run(["umount", "--lazy", point], phase, log, f"unmounting {point}", check=False)
    left = _mounts_under(path)
    if left:
        raise E2EError(f"cannot remove {path}: still mounted: {', '.join(left)}; unmount them by hand")
    # --one-file-system: even a bind mount we failed to see is never descended into.
    run(["rm", "-rf", "--one-file-system", str(path)], phase, log, f"removing {path}")


def _write_files(root: Path, recipe: Recipe) -> None:
    for rel, mode, content in recipe.files:
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink():
            target.unlink()
        target.write_text(content, encoding="utf-8")
        os.chmod(target, mode)


def _dearmored_keyring(recipe: Recipe, folder: Path, phase: Phase, log: Log) -> Path | None:
    """The recipe's key as the binary keyring debootstrap's gpgv reads, after checking its fingerprint."""
    if not recipe.keyring:
        return None
    target = folder / (Path(recipe.keyring).stem + ".gpg")
    run(["gpg", "--batch", "--yes", "--output", str(target), "--dearmor", str(KEYS / recipe.keyring)], phase, log,
        f"dearmor {recipe.keyring}")
    shown = run(["gpg", "--batch", "--with-colons", "--show-keys", str(target)], phase, log, f"read {recipe.keyring}")
    fingerprints = [line.split(":")[9] for line in shown.stdout.splitlines() if line.startswith("fpr:")]
    if fingerprints != [recipe.key_fingerprint]:
        raise E2EError(f"{KEYS / recipe.keyring} must hold the one key {recipe.key_fingerprint}, not {fingerprints}")
    return target


def _debootstrap(root: Path, recipe: Recipe, keyring: Path | None, phase: Phase, log: Log) -> None:
    what = f"debootstrap {recipe.suite} from {recipe.mirror}"
    command = debootstrap_command(root, recipe, keyring)
    try:
        run(command, phase, log, what)
    except PhaseTimeout:
        raise
    except E2EError as exc:
        # A network fetch: one retry, from scratch, said out loud.
        log.event(f"{what} failed; retrying once from scratch (network fetch). First error:\n{exc}")
        remove_tree(root, phase, log)
        run(command, phase, log, f"{what} (retry)")


def _installed(root: Path, link: str) -> Path:
    """The kernel or initrd the tree's /vmlinuz (Debian) or /boot/vmlinuz (Ubuntu) link names, resolved
    inside the tree, never on the host."""
    for place in (root / link, root / "boot" / link):
        if place.is_symlink():
            target = os.readlink(place)
            source = (root / target.lstrip("/")) if target.startswith("/") else (place.parent / target)
            if source.is_file():
                return source
    raise E2EError(f"the installed tree has no {link} (looked for /{link} and /boot/{link}): is the kernel "
                   "(and an initramfs generator) in the recipe's packages?")


def _build(folder: Path, recipe: Recipe, phase: Phase, log: Log) -> str:
    """Make disk.raw, vmlinuz and initrd.img in folder; returns the disk's sha256."""
    root = folder / "rootfs"
    keyring = _dearmored_keyring(recipe, folder, phase, log)
    _debootstrap(root, recipe, keyring, phase, log)
    if _mounts_under(root):
        raise E2EError(f"debootstrap left mounts under {root}: {', '.join(_mounts_under(root))}")
    _write_files(root, recipe)
    for what, cmd in recipe.chroot:
        run(["chroot", str(root), *cmd], phase, log, what)
    # chpasswd reads "user:password" on stdin; the Vagrant convention is no secret.
    run(["chroot", str(root), "chpasswd"], phase, log, "set the box user's password", input=f"{BOX_USER}:{BOX_USER}\n")
    for link, name in (("vmlinuz", KERNEL), ("initrd.img", INITRD)):
        shutil.copy2(_installed(root, link), folder / name)
    disk = folder / DISK
    disk.unlink(missing_ok=True)
    run(["mkfs.ext4", "-q", "-F", "-L", ROOT_LABEL, "-d", str(root), str(disk), recipe.disk_size], phase, log,
        f"mkfs.ext4 -d {root} into {disk}")
    remove_tree(root, phase, log)
    return _sha256(disk)


def ensure(cache_root: Path, phase: Phase, log: Log, recipe: Recipe = DEBIAN_12) -> BaseImage:
    """The base image for the recipe: reused from the cache, else built (root only)."""
    cache_root = Path(cache_root)
    key = cache_key(recipe)
    folder = cache_root / key
    manifest = _complete(folder)
    if manifest is not None:
        image = BaseImage(folder, key, True, manifest["disk_sha256"])
        log.event(f"base image {recipe.name} reused: {folder} (key {key})")
    else:
        if os.geteuid() != 0:
            raise E2EError("building the e2e base image needs root (debootstrap, chroot); run as root or with sudo")
        cache_root.mkdir(parents=True, exist_ok=True)
        staging = cache_root / f".build-{key}-{os.getpid()}"
        remove_tree(staging, phase, log)
        staging.mkdir()
        started = time.monotonic()
        try:
            sha = _build(staging, recipe, phase, log)
            manifest = {
                "key": key,
                "recipe": recipe.name,
                "suite": recipe.suite,
                "mirror": recipe.mirror,
                "packages": list(recipe.packages),
                "disk_size": recipe.disk_size,
                "disk_sha256": sha,
                "built": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "build_seconds": round(time.monotonic() - started, 1),
            }
            (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
            remove_tree(folder, phase, log)
            staging.rename(folder)
        finally:
            remove_tree(staging, phase, log)
        image = BaseImage(folder, key, False, sha)
        log.event(f"base image {recipe.name} built: {folder} (key {key}, {manifest['build_seconds']} s)")
    _point_link(cache_root, recipe.name, key)
    _prune(cache_root, recipe, key, phase, log)
    return image


def _point_link(cache_root: Path, name: str, key: str) -> None:
    """<recipe name> -> <key>, swapped atomically: the e2e profile names files through it."""
    link = cache_root / name
    if link.is_symlink() and os.readlink(link) == key:
        return
    tmp = cache_root / f".{name}-{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    tmp.symlink_to(key)
    os.replace(tmp, link)


def _recipe_of(entry: Path) -> str | None:
    """The recipe a cache entry was built from (its manifest); entries made before there were
    recipes are Debian's. None: not an entry (no manifest), e.g. an interrupted copy."""
    try:
        manifest = json.loads((entry / MANIFEST).read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return manifest.get("recipe", DEBIAN_12.name)


def _prune(cache_root: Path, recipe: Recipe, key: str, phase: Phase, log: Log) -> None:
    """Drop this recipe's older entries: each is a 3-4 GB sparse disk nobody will use again. Another
    recipe's entries stay: another box's run uses them."""
    links = set(RECIPES) | {"current"}  # "current": the single recipe's link before there were two
    for entry in cache_root.iterdir():
        if entry.name.startswith(".build-"):
            # A build killed before its finally ran; only a live owner keeps it.
            owner = entry.name.rsplit("-", 1)[-1]
            if owner.isdigit() and not Path(f"/proc/{owner}").exists():
                log.event(f"removing the leftover of an interrupted build: {entry}")
                remove_tree(entry, phase, log)
            continue
        if entry.name == key or entry.name.startswith("."):
            continue
        if entry.name in links:
            if entry.name == "current" and entry.is_symlink():
                entry.unlink()  # replaced by the recipes' own links
            continue
        if entry.is_dir() and not entry.is_symlink() and _recipe_of(entry) in (recipe.name, None):
            log.event(f"removing stale base image {entry}")
            remove_tree(entry, phase, log)
