"""The e2e base image: Debian 12 installed by debootstrap into a raw ext4 disk, plus its kernel.

It stands in for what the Ubuntu installer leaves on a production box before Packer's
provisioners run: a bootable system with sshd, a `vagrant`/`vagrant` user with passwordless
sudo (the preseed's late_command does the same), DHCP on the NIC. A debian-installer/preseed
install cannot run in CI: the Debian mirror reachable there serves .deb files but not the
installer's .udeb files.

The disk is made without loop mounts (`mkfs.ext4 -d` copies the tree into the image), with
the file system on the whole disk (no partition table), so QEMU boots it directly with the
extracted kernel and initrd: `-kernel vmlinuz -initrd initrd.img -append "root=/dev/vda ..."`.

Cached under OUT/base-image/<key>/, the key being a hash of the package list, the disk
settings and this file; `current` points at the entry the e2e profile uses.
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

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
# minbase: only Essential + apt; everything else is named below, so the image holds what a
# box needs and the key changes when the list does.
VARIANT = "minbase"
PACKAGES = (
    "linux-image-amd64",  # the kernel QEMU boots (and its modules: br_netfilter, overlay)
    "systemd",
    "systemd-sysv",  # /sbin/init
    "udev",
    "dbus",  # systemctl as a non-root user (the box spec runs as vagrant) talks over D-Bus
    "openssh-server",  # Packer's and the spec's way in
    "sudo",  # Packer runs each step through `sudo -S`; the spec checks passwordless sudo
    "ca-certificates",
    "curl",  # the guest steps' downloads
    "gnupg",  # 03-docker verifies Docker's key on Ubuntu; kept so Debian has the same tools
    "procps",  # sysctl (02-kernel, the spec)
    "kmod",  # modprobe (02-kernel)
    "e2fsprogs",  # fsck of the root file system at boot
)
DISK_SIZE = "3G"  # the e2e profile's build.disk_gb must equal it (Packer resizes to that)
ROOT_LABEL = "k4w-root"
HOSTNAME = "k4w-e2e"
BOX_USER = "vagrant"  # Vagrant's box convention: user vagrant, password vagrant
# QEMU user-mode networking answers DNS on 10.0.2.3 (QEMU docs, "Network options", -netdev user).
QEMU_USER_NET_DNS = "10.0.2.3"

# The kernel's names for a virtio NIC: predictable (ens3, enp0s3) or, with net.ifnames=0, eth0.
NIC_NAME_GLOBS = ("en*", "eth*")
NIC_NETWORK_FILE = "etc/systemd/network/10-k4w-dhcp.network"

DISK, KERNEL, INITRD, MANIFEST = "disk.raw", "vmlinuz", "initrd.img", "manifest.json"
CURRENT = "current"

# Files written into the installed tree (path relative to its root, mode, content).
FILES = (
    ("etc/hostname", 0o644, f"{HOSTNAME}\n"),
    # sudo resolves the host name on every call; without this line it warns each time.
    ("etc/hosts", 0o644, f"127.0.0.1\tlocalhost\n127.0.1.1\t{HOSTNAME}\n::1\tlocalhost ip6-localhost ip6-loopback\n"),
    ("etc/fstab", 0o644, "# k4w e2e base image: one ext4 file system on the whole virtio disk\n"
                          "/dev/vda\t/\text4\terrors=remount-ro\t0\t1\n"),
    # Any Ethernet NIC by DHCP: the NIC's name depends on its PCI slot, which Packer chooses.
    # DHCP on the guest's NIC only, matched by name as cloud images do. Not `Type=ether`: a pod's
    # veth, cni0 and flannel.1 are ether too, and networkd detaches every link it manages from a
    # master its .network does not name (systemd-stable@v252.31 src/network/networkd-setlink.c
    # link_request_to_set_master, commit 8c2b7214; Debian 12 runs 252), so pods lost the node.
    (NIC_NETWORK_FILE, 0o644, f"[Match]\nName={' '.join(NIC_NAME_GLOBS)}\n\n[Network]\nDHCP=ipv4\n"),
    # systemd-networkd hands DHCP's DNS only to systemd-resolved (not installed): name it here.
    ("etc/resolv.conf", 0o644, f"nameserver {QEMU_USER_NET_DNS}\n"),
    # The same sudoers line the preseed's late_command writes.
    (f"etc/sudoers.d/{BOX_USER}", 0o440, f"{BOX_USER} ALL=(ALL) NOPASSWD: ALL\n"),
    # Empty: systemd writes a new machine id at first boot, so every guest has its own.
    ("etc/machine-id", 0o444, ""),
)
# Run inside the tree with chroot (no /proc needed): the box user and the network service.
CHROOT_COMMANDS = (
    ("create the box user", ["useradd", "--create-home", "--shell", "/bin/bash", "--groups", "sudo", BOX_USER]),
    ("enable systemd-networkd", ["systemctl", "enable", "systemd-networkd.service"]),
    ("drop the downloaded .debs", ["apt-get", "clean"]),
)


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


def cache_key(source: bytes | None = None) -> str:
    """Hash of everything that shapes the image: packages, suite, mirror, disk, this file."""
    source = source if source is not None else Path(__file__).read_bytes()
    recipe = {
        "suite": SUITE,
        "mirror": MIRROR,
        "variant": VARIANT,
        "packages": sorted(PACKAGES),
        "disk": DISK_SIZE,
        "files": [[p, m, c] for p, m, c in FILES],
        "chroot": [c for _, c in CHROOT_COMMANDS],
        "source_sha256": hashlib.sha256(source).hexdigest(),
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def debootstrap_command(target: Path) -> list[str]:
    return ["debootstrap", f"--variant={VARIANT}", f"--include={','.join(PACKAGES)}", SUITE, str(target), MIRROR]


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


def _write_files(root: Path) -> None:
    for rel, mode, content in FILES:
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink():
            target.unlink()
        target.write_text(content, encoding="utf-8")
        os.chmod(target, mode)


def _debootstrap(root: Path, phase: Phase, log: Log) -> None:
    what = f"debootstrap {SUITE} from {MIRROR}"
    try:
        run(debootstrap_command(root), phase, log, what)
    except PhaseTimeout:
        raise
    except E2EError as exc:
        # A network fetch: one retry, from scratch, said out loud.
        log.event(f"{what} failed; retrying once from scratch (network fetch). First error:\n{exc}")
        remove_tree(root, phase, log)
        run(debootstrap_command(root), phase, log, f"{what} (retry)")


def _build(folder: Path, phase: Phase, log: Log) -> str:
    """Make disk.raw, vmlinuz and initrd.img in folder; returns the disk's sha256."""
    root = folder / "rootfs"
    _debootstrap(root, phase, log)
    if _mounts_under(root):
        raise E2EError(f"debootstrap left mounts under {root}: {', '.join(_mounts_under(root))}")
    _write_files(root)
    for what, cmd in CHROOT_COMMANDS:
        run(["chroot", str(root), *cmd], phase, log, what)
    # chpasswd reads "user:password" on stdin; the Vagrant convention is no secret.
    run(["chroot", str(root), "chpasswd"], phase, log, "set the box user's password", input=f"{BOX_USER}:{BOX_USER}\n")
    for link, name in (("vmlinuz", KERNEL), ("initrd.img", INITRD)):
        # /vmlinuz -> boot/vmlinuz-<version>: resolve it inside the tree, never on the host.
        target = os.readlink(root / link) if (root / link).is_symlink() else link
        source = root / target.lstrip("/")
        if not source.is_file():
            raise E2EError(f"the installed tree has no {link} ({target}): is linux-image-amd64 in the package list?")
        shutil.copy2(source, folder / name)
    disk = folder / DISK
    disk.unlink(missing_ok=True)
    run(["mkfs.ext4", "-q", "-F", "-L", ROOT_LABEL, "-d", str(root), str(disk), DISK_SIZE], phase, log,
        f"mkfs.ext4 -d {root} into {disk}")
    remove_tree(root, phase, log)
    return _sha256(disk)


def ensure(cache_root: Path, phase: Phase, log: Log) -> BaseImage:
    """The base image for the current recipe: reused from the cache, else built (root only)."""
    cache_root = Path(cache_root)
    key = cache_key()
    folder = cache_root / key
    manifest = _complete(folder)
    if manifest is not None:
        image = BaseImage(folder, key, True, manifest["disk_sha256"])
        log.event(f"base image reused: {folder} (key {key})")
    else:
        if os.geteuid() != 0:
            raise E2EError("building the e2e base image needs root (debootstrap, chroot); run as root or with sudo")
        cache_root.mkdir(parents=True, exist_ok=True)
        staging = cache_root / f".build-{key}-{os.getpid()}"
        remove_tree(staging, phase, log)
        staging.mkdir()
        started = time.monotonic()
        try:
            sha = _build(staging, phase, log)
            manifest = {
                "key": key,
                "suite": SUITE,
                "mirror": MIRROR,
                "packages": list(PACKAGES),
                "disk_size": DISK_SIZE,
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
        log.event(f"base image built: {folder} (key {key}, {manifest['build_seconds']} s)")
    _point_current(cache_root, key)
    _prune(cache_root, key, phase, log)
    return image


def _point_current(cache_root: Path, key: str) -> None:
    """`current` -> <key>, swapped atomically: the e2e profile names files through it."""
    link = cache_root / CURRENT
    if link.is_symlink() and os.readlink(link) == key:
        return
    tmp = cache_root / f".{CURRENT}-{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    tmp.symlink_to(key)
    os.replace(tmp, link)


def _prune(cache_root: Path, key: str, phase: Phase, log: Log) -> None:
    """Drop entries of older recipes: each is a 3 GB sparse disk nobody will use again."""
    for entry in cache_root.iterdir():
        if entry.name.startswith(".build-"):
            # A build killed before its finally ran; only a live owner keeps it.
            owner = entry.name.rsplit("-", 1)[-1]
            if owner.isdigit() and not Path(f"/proc/{owner}").exists():
                log.event(f"removing the leftover of an interrupted build: {entry}")
                remove_tree(entry, phase, log)
            continue
        if entry.name in (key, CURRENT) or entry.name.startswith("."):
            continue
        if entry.is_dir() and not entry.is_symlink():
            log.event(f"removing stale base image {entry}")
            remove_tree(entry, phase, log)
