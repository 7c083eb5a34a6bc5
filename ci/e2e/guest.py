"""Boot a QEMU guest from a disk image and talk to it over SSH, the way the box spec will.

The guest boots the image's own kernel and initrd directly (-kernel/-initrd), runs on TCG
(the CI host's /dev/kvm hangs ordinary guests), gets QEMU user-mode networking with sshd
forwarded to a free port on 127.0.0.1, and writes to a throwaway qcow2 overlay, so the
image under test is never modified. The context manager stops QEMU also when a step fails.
"""

from __future__ import annotations

import contextlib
import shlex
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from k4w.infra import proc, tools
from k4w.derive import control_plane
from k4w.verify import discovery
from .phases import E2EError, Log, Phase, run
from .squid import free_port

QEMU = "qemu-system-x86_64"
# The one emulated CPU of every k4w guest (k4w/derive/control_plane.py says why each feature, and why not max).
GUEST_CPU = control_plane.qemu_cpu()
# A kernel prints its banner ("Linux version ...") within seconds under TCG (2 s measured for Ubuntu's
# 7.0 on this 2-core host): a serial console still empty after this long means the kernel never
# started, and waiting out the whole boot budget for SSH tells nothing more.
FIRST_OUTPUT_S = 60
# Vagrant's insecure private key: the box authorizes its public half (05-vagrant-key.sh).
# Debian's vagrant package ships it here; Vagrant's own installers under embedded/gems.
VAGRANT_KEY_GLOBS = (
    "/usr/share/rubygems-integration/all/gems/vagrant-*/keys/vagrant",
    "/opt/vagrant/embedded/gems/gems/vagrant-*/keys/vagrant",
    "/opt/vagrant/embedded/gems/*/gems/vagrant-*/keys/vagrant",
)
SSH_ALIAS = "k4w-e2e-guest"
# Seconds one SSH connection attempt may take while the guest boots.
SSH_CONNECT_TIMEOUT = 10


def vagrant_insecure_key(dest: Path) -> Path:
    """Copy Vagrant's insecure private key to dest with mode 0600 (ssh rejects a readable key)."""
    for pattern in VAGRANT_KEY_GLOBS:
        found = sorted(Path("/").glob(pattern.lstrip("/")))
        if found:
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(found[-1], dest)
            dest.chmod(0o600)
            return dest
    raise E2EError("Vagrant's insecure private key was not found (keys/vagrant in the vagrant gem). "
                   f"Install Vagrant with: {tools.INSTALL['vagrant']}")


def extract_box_image(box_file: Path, dest: Path, phase: Phase, log: Log) -> Path:
    """box.img out of a libvirt .box, with GNU tar as Vagrant uses a real tar for boxes.

    Not Python's tarfile: Packer (Go's archive/tar) writes GNU headers carrying atime/ctime
    where ustar keeps its name prefix, and tarfile then reads "15300375201/box.img".
    """
    dest.mkdir(parents=True, exist_ok=True)
    run(["tar", "-xzf", str(box_file), "-C", str(dest)], phase, log, f"unpack {box_file.name}")
    image = dest / "box.img"
    if not image.is_file():
        found = ", ".join(sorted(p.name for p in dest.iterdir())) or "nothing"
        raise E2EError(f"{box_file} holds no box.img (found: {found}): not a libvirt box")
    return image


@dataclass
class Ssh:
    """ssh to the guest through the same ssh_config the box spec gets."""

    config: Path
    key: Path
    host: str
    port: int
    user: str
    log: Log

    def argv(self, command: str) -> list[str]:
        return ["ssh", "-F", str(self.config), "-o", "BatchMode=yes", "-o", f"ConnectTimeout={SSH_CONNECT_TIMEOUT}",
                SSH_ALIAS, command]

    def run(self, command: str, phase: Phase, what: str, *, input: str | None = None, check: bool = True,
            quiet: bool = False) -> proc.Result:
        if quiet:  # readiness polls: keep them out of the log
            try:
                return proc.run(self.argv(command), input=input, timeout=min(phase.remaining(what), SSH_CONNECT_TIMEOUT + 5))
            except proc.TimedOut:
                return proc.Result([], 255, "", "timeout")
        return run(self.argv(command), phase, self.log, what, input=input, check=check)

    def upload(self, content: bytes | str, path: str, phase: Phase) -> None:
        data = content if isinstance(content, str) else content.decode()
        self.run(f"cat > {shlex.quote(path)}", phase, f"upload {path}", input=data)


@dataclass
class Guest:
    proc: proc.Process
    ssh: Ssh
    serial_log: Path
    command: list[str]

    def serial_tail(self, chars: int = 3000) -> str:
        if not self.serial_log.exists():
            return "(no serial output)"
        return self.serial_log.read_text(encoding="utf-8", errors="replace")[-chars:]


def qemu_command(disk: Path, kernel: Path, initrd: Path, append: str, *, memory_mb: int, cpus: int, ssh_port: int,
                 serial_log: Path, pidfile: Path, cluster_nic: tuple[str, str] | None = None) -> list[str]:
    """cluster_nic: (MAC, node CIDR) of a second NIC, as cluster-up hot-adds on Hyper-V: a user-mode
    network of its own with restrict=on (nothing leaves through it), where cluster-ip.sh finds the NIC
    by its MAC and gives it the node's static address."""
    second = ["-netdev", f"user,id=cluster,restrict=on,net={cluster_nic[1]}",
              "-device", f"virtio-net-pci,netdev=cluster,mac={cluster_nic[0]}"] if cluster_nic else []
    return [
        QEMU,
        "-machine", "pc,accel=tcg",  # TCG: /dev/kvm on the CI hosts hangs guests
        # QEMU's default qemu64 model offers no AES-NI, PCLMULQDQ, SSE4 or BMI2/ADX, so Go's crypto falls
        # back to its generic code: kube-apiserver's TLS handshakes then missed their 10 s limit under TCG.
        # These TCG implements (target/i386/cpu.c TCG_*_FEATURES in QEMU 7.2).
        "-cpu", GUEST_CPU,
        "-m", str(memory_mb),
        "-smp", str(cpus),
        "-display", "none",
        "-monitor", "none",
        "-serial", f"file:{serial_log}",
        "-pidfile", str(pidfile),
        "-no-reboot",
        # discard=unmap: 07-cleanup's fstrim reaches the overlay instead of zero-filling it.
        "-drive", f"file={disk},if=virtio,format=qcow2,discard=unmap",
        "-netdev", f"user,id=net0,hostfwd=tcp:127.0.0.1:{ssh_port}-:22",
        "-device", "virtio-net-pci,netdev=net0",
        *second,
        "-kernel", str(kernel),
        "-initrd", str(initrd),
        "-append", append,
    ]


def _silent(serial_log: Path) -> bool:
    return not serial_log.exists() or serial_log.stat().st_size == 0


def _wait_for_ssh(guest: Guest, phase: Phase) -> float:
    started = time.monotonic()
    last = ""
    while True:
        if guest.proc.poll() is not None:
            raise E2EError(f"QEMU exited with {guest.proc.returncode} before SSH answered. Serial console:\n{guest.serial_tail()}")
        if time.monotonic() - started >= FIRST_OUTPUT_S and _silent(guest.serial_log):
            raise E2EError(f"the guest's kernel printed nothing on its serial console in {FIRST_OUTPUT_S} s: it stopped "
                           f"before its console started (under TCG, e.g. a -cpu feature set it cannot boot with). "
                           f"QEMU command: {shlex.join(guest.command)}")
        if time.monotonic() >= phase.deadline:
            raise E2EError(f"the guest's SSH did not answer within phase '{phase.name}' ({phase.budget_s:.0f} s); "
                           f"last ssh error: {last.strip()}\nSerial console:\n{guest.serial_tail()}")
        res = guest.ssh.run("true", phase, "wait for SSH", quiet=True)
        if res.returncode == 0:
            return time.monotonic() - started
        last = res.stderr or res.stdout
        time.sleep(1)  # poll interval of the SSH condition above, not a readiness sleep


# The kernel's clock source (Documentation/ABI/testing/sysfs-devices-system-clocksource).
CLOCKSOURCE = "/sys/devices/system/clocksource/clocksource0/current_clocksource"


def require_fast_clock(current: str, append: str) -> None:
    """Refuse a guest whose clock is an emulated device. Under TCG a kernel that distrusts the TSC reads
    the HPET (or the ACPI PM timer), and then every clock read of a Go daemon traps into QEMU: the first
    `--cluster` run spent 55-72 % of the guest in the kernel and kube-apiserver never became healthy."""
    clock = current.strip()
    if clock != "tsc":
        raise E2EError(f"the guest's clock source is {clock or '(none)'}, not tsc: every clock read traps into QEMU "
                       f"and kubeadm's control plane cannot start in time under TCG. The kernel command line "
                       f"({append!r}) needs tsc=reliable clocksource=tsc (the e2e box profile's build.qemu.append).")


# What Go's crypto needs for its AES-GCM assembly (crypto/internal/fips140 aes/gcm: AES-NI, PCLMULQDQ,
# SSE4.1), named as /proc/cpuinfo names them: without it TLS falls back to generic Go code.
GO_CRYPTO_FLAGS = ("aes", "pclmulqdq", "sse4_1")


def require_cpu_features(cpuinfo_flags: str) -> None:
    """Refuse a guest CPU model without the instructions Go's crypto uses: its generic code under TCG
    made kube-apiserver's TLS handshakes miss their 10 s limit (the second `--cluster` run)."""
    missing = [f for f in GO_CRYPTO_FLAGS if f not in cpuinfo_flags.split()]
    if missing:
        raise E2EError(f"the guest CPU lacks {', '.join(missing)}: Go's TLS falls back to generic code and the "
                       f"control plane cannot answer in time under TCG. Give QEMU -cpu {GUEST_CPU}.")


@contextlib.contextmanager
def booted(image: Path, kernel: Path, initrd: Path, append: str, workdir: Path, phase: Phase, log: Log, *,
           memory_mb: int = 1024, cpus: int = 2, user: str = "vagrant", keep: bool = False,
           cluster_nic: tuple[str, str] | None = None) -> Iterator[Guest]:
    """A running guest on a qcow2 overlay of image, reachable over SSH; stopped on exit."""
    for tool in (QEMU, "qemu-img", "ssh"):
        tools.require(tool)
    workdir.mkdir(parents=True, exist_ok=True)
    overlay = workdir / "overlay.qcow2"
    run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", str(Path(image).resolve()), str(overlay)],
        phase, log, "create the guest's overlay disk")
    key = vagrant_insecure_key(workdir / "vagrant.key")
    port = free_port()
    config = workdir / "ssh-config"
    config.write_text(discovery.ssh_target_config(SSH_ALIAS, "127.0.0.1", port, user, key), encoding="utf-8")
    serial = workdir / "serial.log"
    cmd = qemu_command(overlay, kernel, initrd, append, memory_mb=memory_mb, cpus=cpus, ssh_port=port,
                       serial_log=serial, pidfile=workdir / "qemu.pid", cluster_nic=cluster_nic)
    log.write("$ " + shlex.join(cmd) + "\n")
    qemu = proc.start(cmd, group=True, capture=False)
    guest = Guest(qemu, Ssh(config, key, "127.0.0.1", port, user, log), serial, cmd)
    try:
        seconds = _wait_for_ssh(guest, phase)
        log.event(f"guest QEMU {qemu.pid} answers SSH on 127.0.0.1:{port} after {seconds:.0f} s")
        shown = guest.ssh.run(f"cat {CLOCKSOURCE}; grep -m1 '^flags' /proc/cpuinfo", phase, "read the guest's clock and CPU")
        clock, _, flags = shown.stdout.partition("\n")
        require_fast_clock(clock, append)
        require_cpu_features(flags)
        yield guest
    finally:
        qemu.stop()
        log.event(f"guest QEMU {qemu.pid} stopped")
        if not keep:
            overlay.unlink(missing_ok=True)
