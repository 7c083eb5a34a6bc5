"""`invoke doctor` on a Linux host (host.provider libvirt): what the Hyper-V checks are on Windows.

libvirt reachable, KVM usable (or TCG named with its cost), vagrant-libvirt, the QEMU tools, the UEFI firmware
and a CD tool for the bakes, the storage
pool and its free space, and the two networks `invoke network-up` defines (the same comparison, from
k4w.cluster.libvirt_network). Each check says what it found and the fix in one line. virsh output is read
where it does not depend on the locale: `--name` lists and XML.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import shutil
from pathlib import Path

from lxml import etree

from k4w.cluster import libvirt_network as lvnet
from k4w.derive.cluster import Cluster
from k4w.infra import packer_cli, proc
from k4w.infra.errors import K4wError
from k4w.infra.host import Check
from k4w.infra.redact import redact
from k4w.infra.tools import INSTALL

KVM_DEVICE = Path("/dev/kvm")
# linux include/uapi/linux/kvm.h (read in Debian's linux-libc-dev 6.1.187): KVMIO 0xAE, KVM_GET_API_VERSION
# _IO(KVMIO, 0x00) = 0xAE00, and KVM_API_VERSION 12, the version a usable /dev/kvm answers.
KVM_GET_API_VERSION = 0xAE00
KVM_API_VERSION = 12
# What TCG costs, measured on this project's host (issue 35): QEMU's emulation runs guests roughly ten times
# slower than KVM, and a single-node cluster's kubeadm init took 340 s under TCG.
TCG_COST = "QEMU's emulation, about 10x slower than KVM (measured here: a single-node cluster's kubeadm init took 340 s under TCG)"
# A VM disk is a qcow2 overlay on its box's image in the pool, which grows up to the box's disk size
# (boxes/<box>.yml build.disk_gb); a profile without one counts this much.
DEFAULT_DISK_GB = 20
LIBVIRTD_FIX = ("start libvirtd (systemctl enable --now libvirtd; without systemd: virtlogd -d; libvirtd -d) and, as a user, "
                "join its group: sudo usermod -aG libvirt $USER, then log in again")
BOTH = ("build", "cluster")
# vagrant-libvirt 0.11.2 defines this one pool itself when it is missing, in this folder, and refuses any other
# missing pool (lib/vagrant-libvirt/action/handle_storage_pool.rb; the folder: util/storage_util.rb storage_pool_path).
VAGRANT_LIBVIRT_POOL = "default"
VAGRANT_LIBVIRT_POOL_PATH = "/var/lib/libvirt/images"


def kvm_state(device: Path = KVM_DEVICE) -> tuple[bool, str]:
    """Whether this process can use KVM: the device exists, opens read-write and answers API version 12."""
    try:
        fd = os.open(device, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return False, f"{device} does not exist (no kvm module loaded, or virtualization off in the firmware or the parent VM)"
    except PermissionError:
        return False, f"{device} exists but this user cannot open it read-write (not in the kvm group)"
    except OSError as exc:
        return False, f"{device}: {exc.strerror or exc}"
    try:
        version = fcntl.ioctl(fd, KVM_GET_API_VERSION)
    except OSError as exc:
        return False, f"{device} opens but is not a KVM device ({errno.errorcode.get(exc.errno, exc.errno)})"
    finally:
        os.close(fd)
    if version != KVM_API_VERSION:
        return False, f"{device} answers KVM API version {version}, not {KVM_API_VERSION}"
    return True, f"{device} opens read-write (KVM API {version})"


def _libvirt_has_kvm(virsh: lvnet.Virsh) -> bool:
    """libvirt's own verdict: with qemu:///system its QEMU runs as its own user, which may use KVM where we cannot."""
    try:
        return virsh.run("domcapabilities", "--virttype", "kvm").returncode == 0
    except (OSError, K4wError):
        return False


def kvm_check(cluster: Cluster, virsh: lvnet.Virsh, reachable: bool) -> Check:
    accelerator = cluster.config.libvirt.accelerator
    usable, detail = kvm_state()
    if not usable and "cannot open" in detail and reachable and accelerator == "kvm" and _libvirt_has_kvm(virsh):
        # The cluster's VMs run in libvirt's QEMU, which can; a bake's QEMU (Packer's qemu builder) runs as this user.
        return Check("KVM", False, f"{detail}; libvirt's QEMU can use it (virsh domcapabilities --virttype kvm), "
                                   "but a bake's QEMU runs as you", "sudo usermod -aG kvm $USER, then log in again", ("build",))
    if usable and accelerator == "kvm":
        return Check("KVM", True, f"usable: {detail}", stages=BOTH)
    if usable:
        return Check("KVM", False, f"usable ({detail}), but libvirt.accelerator is tcg: {TCG_COST}",
                     "set libvirt.accelerator: kvm in cluster.yml", stages=())
    if accelerator == "kvm":
        return Check("KVM", False, f"not usable: {detail}; libvirt.accelerator is kvm",
                     f"set libvirt.accelerator: tcg in cluster.yml ({TCG_COST}), or enable VT-x/AMD-V (nested virtualization "
                     "on a VM host), load kvm_intel or kvm_amd and join the kvm group", stages=BOTH)
    return Check("KVM", True, f"not usable ({detail}); libvirt.accelerator tcg: {TCG_COST}", stages=BOTH)


def reachable_check(virsh: lvnet.Virsh) -> Check:
    name = f"libvirt ({virsh.uri})"
    if not shutil.which("virsh"):
        return Check(name, False, "virsh is not installed", lvnet.VIRSH_INSTALL.replace("libvirt-clients", "libvirt-daemon-system"), BOTH)
    try:
        result = virsh.run("version")
    except K4wError as exc:
        return Check(name, False, redact(str(exc)), LIBVIRTD_FIX, BOTH)
    if result.returncode != 0:
        return Check(name, False, f"virsh -c {virsh.uri} version: {proc.tail(result.output, 2)}", LIBVIRTD_FIX, BOTH)
    library = re.search(r"libvirt (\d[\w.+~-]*)", result.stdout)
    qemu = re.findall(r"QEMU (\d[\w.+~-]*)", result.stdout)
    found = ", ".join(filter(None, [library and f"libvirt {library[1]}", qemu and f"QEMU {qemu[-1]}"]))
    return Check(name, True, f"reachable: {found or result.stdout.strip().splitlines()[0]}", stages=BOTH)


def vagrant_libvirt_check() -> Check:
    name, fix = "vagrant-libvirt plugin", "apt-get install -y vagrant-libvirt (or: vagrant plugin install vagrant-libvirt)"
    vagrant = shutil.which("vagrant")
    if not vagrant:
        return Check(name, False, "not checked: vagrant is not installed", INSTALL["vagrant"] + " vagrant-libvirt", ("cluster",))
    try:
        result = proc.run([vagrant, "plugin", "list"], env={**os.environ, "VAGRANT_CHECKPOINT_DISABLE": "1"}, timeout=180)
    except (OSError, K4wError) as exc:
        return Check(name, False, f"'vagrant plugin list' did not run: {redact(str(exc))}", fix, ("cluster",))
    line = next((ln.strip() for ln in result.stdout.splitlines() if ln.startswith("vagrant-libvirt ")), None)
    if result.returncode != 0 or not line:
        return Check(name, False, "not in 'vagrant plugin list'" if result.returncode == 0 else
                     f"'vagrant plugin list' exited {result.returncode}: {proc.tail(result.output, 2)}", fix, ("cluster",))
    return Check(name, True, line, stages=("cluster",))


def qemu_checks() -> list[Check]:
    checks = []
    for tool in ("qemu-system-x86_64", "qemu-img"):
        path = shutil.which(tool)
        checks.append(Check(tool, bool(path), path or "not installed", INSTALL[tool], BOTH))
    return checks


def bake_checks() -> list[Check]:
    """What Packer's qemu builds need beyond QEMU: the UEFI firmware every qemu source boots and a tool that
    writes the setup CD (cd_files)."""
    missing = [path for path in packer_cli.UEFI_FIRMWARE.values() if not Path(path).is_file()]
    firmware = Check("UEFI firmware (OVMF)", not missing,
                     f"missing: {', '.join(missing)}" if missing else ", ".join(packer_cli.UEFI_FIRMWARE.values()),
                     packer_cli.UEFI_FIRMWARE_INSTALL, ("build",))
    tool = packer_cli.iso_tool()
    cd = Check("CD authoring tool (Packer cd_files)", bool(tool), tool or f"none of {', '.join(packer_cli.ISO_TOOLS)} on PATH",
               packer_cli.ISO_TOOL_INSTALL, ("build",))
    return [firmware, cd]


def disk_need_gb(cluster: Cluster) -> tuple[int, str]:
    """What the VM disks can grow to in the pool, and how that was counted."""
    sizes = []
    for node in cluster.config.nodes:
        build = cluster.profile(node.box).data.get("build") or {}
        sizes.append((node.name, int(build.get("disk_gb") or DEFAULT_DISK_GB)))
    return sum(size for _, size in sizes), " + ".join(f"{name} {size}" for name, size in sizes)


def pool_check(cluster: Cluster, virsh: lvnet.Virsh) -> list[Check]:
    pool = cluster.config.libvirt.storage_pool
    name = f"storage pool '{pool}'"
    uri = virsh.uri
    try:
        pools = {ln.strip() for ln in virsh.ok("pool-list", "--all", "--name").splitlines() if ln.strip()}
        active = {ln.strip() for ln in virsh.ok("pool-list", "--name").splitlines() if ln.strip()}
    except K4wError as exc:
        return [Check(name, False, f"not checked: {exc}", LIBVIRTD_FIX, ("cluster",))]
    if pool not in pools and pool == VAGRANT_LIBVIRT_POOL:
        return [Check(name, True, f"not defined yet: vagrant-libvirt defines '{pool}' in {VAGRANT_LIBVIRT_POOL_PATH} at the "
                                  "first `vagrant up`", stages=("cluster",))]
    if pool not in pools:
        return [Check(name, False, f"does not exist at {uri} (pools: {', '.join(sorted(pools)) or 'none'})",
                      f"virsh -c {uri} pool-define-as {pool} dir --target /var/lib/libvirt/images; then pool-build, pool-start "
                      f"and pool-autostart {pool}; or set libvirt.storage_pool to an existing pool", ("cluster",))]
    if pool not in active:
        return [Check(name, False, "defined but inactive", f"virsh -c {uri} pool-start {pool}; virsh -c {uri} pool-autostart {pool}",
                      ("cluster",))]
    root = etree.fromstring(virsh.ok("pool-dumpxml", pool).encode("utf-8"), etree.XMLParser(resolve_entities=False, no_network=True))
    available = int(root.findtext("available") or 0) / 2**30   # unit='bytes', as libvirt prints it
    target = root.findtext("target/path") or "?"
    need, how = disk_need_gb(cluster)
    checks = [Check(name, True, f"active, {target}", stages=("cluster",))]
    # A warning only: the overlays are thin and grow as the guests write, so a cluster starts with less.
    checks.append(Check(f"{name} free space", available >= need,
                        f"{available:.0f} GiB free; the VM disks can grow to {need} GiB (each node's box build.disk_gb: {how})",
                        f"free space in {target}, or set libvirt.storage_pool to a pool on a bigger disk", stages=()))
    return checks


def network_checks(cluster: Cluster, virsh: lvnet.Virsh) -> list[Check]:
    cfg = cluster.config
    checks = []
    for want in lvnet.wanted(cfg):
        name = f"{want.role} network '{want.name}'"
        try:
            found = lvnet.state(virsh, want)
        except K4wError as exc:
            checks.append(Check(name, False, f"not checked: {exc}", LIBVIRTD_FIX, ("cluster",)))
            continue
        if not found.exists:
            clash = lvnet.overlaps(virsh, want)
            checks.append(Check(name, False, f"not defined (wanted: {want.describe()})"
                                + (f"; its range overlaps {'; '.join(clash)}" if clash else ""),
                                "invoke network-up" if not clash else
                                f"choose another {'libvirt.management_cidr' if want.role == 'management' else 'network.node_cidr'}, "
                                "or remove that network; then invoke network-up", ("cluster",)))
        elif found.problems:
            checks.append(Check(name, False, "differs from cluster.yml: " + "; ".join(found.problems),
                                f"set {want.setting} to a new name and run invoke network-up, or remove the network once no VM "
                                f"uses it (virsh -c {cfg.libvirt.uri} net-destroy {want.name}; net-undefine {want.name})", ("cluster",)))
        elif not found.active:
            checks.append(Check(name, False, f"defined as cluster.yml says but inactive ({want.describe()})",
                                "invoke network-up (it starts the network)", ("cluster",)))
        else:
            autostart = "" if found.autostart else "; autostart off, so it is down after the host restarts (invoke network-up sets it)"
            checks.append(Check(name, True, f"active: {want.describe()}{autostart}", stages=("cluster",)))
    return checks


def checks(cluster: Cluster) -> list[Check]:
    """Every check of a libvirt host, in the order a user fixes them."""
    virsh = lvnet.Virsh(cluster.config.libvirt.uri)
    reach = reachable_check(virsh)
    found = [reach, kvm_check(cluster, virsh, reach.ok), vagrant_libvirt_check(), *qemu_checks(), *bake_checks()]
    if not reach.ok:
        skipped = "not checked: libvirt is not reachable (see above)"
        return [*found, Check(f"storage pool '{cluster.config.libvirt.storage_pool}'", False, skipped, LIBVIRTD_FIX, ("cluster",)),
                *(Check(f"{w.role} network '{w.name}'", False, skipped, LIBVIRTD_FIX, ("cluster",)) for w in lvnet.wanted(cluster.config))]
    return [*found, *pool_check(cluster, virsh), *network_checks(cluster, virsh)]
