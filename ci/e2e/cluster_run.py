"""`invoke e2e --cluster`: a real single-node kubeadm cluster on a fresh guest of the baked containerd-era box.

cluster-up's own steps run on the guest, through a RemoteExec over the guest's SSH instead of
`vagrant ssh`: step_master_init (cluster-init.sh with the rendered kubeadm config), step_manifests (the
rendered Flannel manifest, the node-selector patches, the wait for node Ready) and step_rollouts
(CoreDNS, kube-proxy, Flannel). The node's cluster address goes on a second NIC with the node's cluster
MAC, as Hyper-V hot-adds it. On the Ubuntu 26.04 image cluster-up's own step_cluster_ip configures it
(cluster-ip.sh writes netplan); the Debian image has systemd-networkd alone, where cluster-ip.sh would
take its ifupdown branch, so there the harness writes the networkd file netplan would render. No registry is reachable: the images come from cluster_images,
imported with `ctr -n k8s.io images import`. Then the control-plane taint goes and the checks run:
CoreDNS Ready, a pod's address in the pod CIDR, a Service's ClusterIP answering, its name resolving
through cluster DNS.

Each step is a phase of its own (seconds in the timing table and in report.json's `cluster`).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import secrets
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import yaml

from k4w.infra import pinned_tools, proc
from k4w.cluster import steps as cluster_steps
from k4w.cluster.machines import Machine, load_cluster, mac_with
from k4w.cluster.remote import RemoteError
from k4w.cluster.state import STATE_FILE
from k4w.cluster.up import make_context
from k4w.derive import control_plane
from k4w.derive.cluster import Cluster
from k4w.verify.kubectl import pod_ready
from . import cluster_file, cluster_images, guest as guest_mod, oci_archive
from .phases import E2EError, Log, Phase, Phases, PhaseTimeout

# The CI boxes of the containerd era: the cluster needs their real containerd and kubelet. BOX is the
# one CI runs (on the Debian 12 image); ubuntu-2604-e2e runs on Ubuntu 26.04 itself.
BOX = "ubuntu-2404-e2e"
BOXES = (BOX, "ubuntu-2604-e2e")
# Per step, in seconds, from the runs quoted in docs/development.md (TCG, 2 shared cores), with margin. The first
# runs (emulated HPET clock, qemu64 CPU): images 18-20 s, boot 100-140 s, import 505-536 s, and kubeadm
# init never saw a healthy API server. With the TSC and the CPU features (guest.py): images 25 s, boot
# 81 s, import 310 s, address 4 s, init 234 s, manifests until node Ready 245 s, untaint 19 s (third
# run). The passing fifth run: images 12 s, boot 61 s, import 273 s, address 3 s, init 340 s, manifests
# 305 s, untaint 9 s, rollouts 52 s, checks 51 s. Every wait polls and ends at its deadline.
BUDGETS = {
    "cluster images": 120,
    "cluster boot": 420,
    "cluster import": 1200,
    "cluster ip": 120,
    "cluster init": 1800,
    "cluster manifests": 1500,
    # Two kubectl calls, but each one waits out an API server that is away for up to cluster.ready_timeout
    # (cluster-up's kubectl retry); a shorter budget cut the fourth ubuntu-2604-e2e run off mid-retry.
    "cluster untaint": cluster_file.READY_TIMEOUT_S,
    "cluster rollouts": 1500,
    "cluster checks": 900,
}
CLUSTER_BUDGET_S = sum(BUDGETS.values())
# Sorts before the base image's catch-all DHCP file (base_image.NIC_NETWORK_FILE, 10-k4w-dhcp.network): the first
# .network file that matches a link configures it (systemd.network(5)).
CLUSTER_NETWORK_FILE = "/etc/systemd/network/05-k4w-cluster.network"
# kubeadm's control-plane taint (k8s.io/kubernetes@v1.37.2 cmd/kubeadm/app/constants LabelNodeRoleControlPlane).
CONTROL_PLANE_TAINT = "node-role.kubernetes.io/control-plane"
# The test workload's image: the host's busybox, under a name in the .invalid TLD (RFC 2606), which no
# registry can serve, with imagePullPolicy Never.
TEST_IMAGE = "k4w.invalid/e2e-busybox:1"
WEB, CLIENT = "k4w-e2e-web", "k4w-e2e-client"
WEB_PORT = 8080   # busybox httpd in the web pod; the Service maps port 80 to it
FETCH_TIMEOUT_S = 5
# TCG only: the control plane scaled to an emulated CPU, the product's own values (k4w/derive/control_plane.py
# says why each is needed, from this harness's runs): the leader-election leases of kube-controller-manager and
# kube-scheduler (with the defaults the fourth run's lost their leases and exited, so no EndpointSlice was made),
# and the liveness failureThreshold of kube-apiserver and etcd (runs 2 and 4: kube-apiserver restarted again
# and again while etcd answered slowly). The run's cluster.yml says libvirt.accelerator tcg
# (cluster_file.text(emulated_cpu=True)), so the rendered kubeadm config carries them and kubeadm writes
# the static Pods scaled: the harness only waits for them. A rendered config without them (a cluster.yml
# that does not say tcg) still gets them by an edit of the manifests kubeadm wrote, where kubeadm set
# --leader-elect=true (k8s.io/kubernetes@v1.37.2 cmd/kubeadm/app/phases/controlplane/manifests.go).
TCG_LEASE_FLAGS = control_plane.SCALING.leader_election_flags
LEADER_ELECTING = control_plane.LEADER_ELECTING
TCG_LIVENESS_FAILURE_THRESHOLD = control_plane.LIVENESS_FAILURE_THRESHOLD
KUBEADM_LIVENESS_FAILURE_THRESHOLD = control_plane.KUBEADM_LIVENESS_FAILURE_THRESHOLD
LIVENESS_TOLERANT = control_plane.LIVENESS_TOLERANT


def web_command(port: int = WEB_PORT, root: str = "/www") -> list[str]:
    """The web pod's server: busybox httpd in the foreground."""
    return ["/bin/busybox", "httpd", "-f", "-p", str(port), "-h", root]


def client_fetch(target: str) -> list[str]:
    """The client pod's request. Bounded by busybox `timeout`, not wget's -T: Debian 12's busybox
    (1.35) wget dies of SIGSEGV when given -T (exit 139, the fourth --cluster run and the host)."""
    return ["/bin/busybox", "timeout", str(FETCH_TIMEOUT_S), "/bin/busybox", "wget", "-q", "-O", "-", f"http://{target}/"]


@dataclass
class ClusterReport:
    """report.json's `cluster`: what ran, how long each step took, what was found."""

    box: str = BOX
    images: list[dict] = field(default_factory=list)
    # The box's stand-ins (the run's own list, empty for the real containerd-era bake); every image
    # program is the real upstream one at its pinned tag, or a substitute listed apart.
    stand_ins: list[str] = field(default_factory=list)
    substitutes: dict[str, dict] = field(default_factory=dict)
    checks: dict[str, str] = field(default_factory=dict)
    steps: list[dict] = field(default_factory=list)


class GuestRemote:
    """k4w.cluster.remote.RemoteExec over the guest's SSH, bounded by the current phase's deadline.
    stdout only is returned (kubectl's JSON must not be mixed with its warnings); both go to the log."""

    def __init__(self, ssh: guest_mod.Ssh, log: Log):
        self.ssh, self.log = ssh, log
        self.phase: Phase | None = None

    def run(self, machine: Machine, command: str, stdin: str = "") -> str:
        what = f"[{machine.name}] {command}"
        self.log.write(f"$ {what}\n")
        try:
            done = proc.run(self.ssh.argv(command), input=stdin or None, timeout=self.phase.remaining(what))
        except proc.TimedOut:
            raise self.phase.timeout_error(what) from None
        self.log.write(done.stdout + done.stderr)
        if done.returncode != 0:
            raise RemoteError(machine.name, command, done.returncode, done.stdout + done.stderr)
        return done.stdout

    def upload(self, machine: Machine, source: Path, destination: str) -> None:
        scp(self.ssh, Path(source), destination, self.phase, self.log)


def scp(ssh: guest_mod.Ssh, source: Path, destination: str, phase: Phase, log: Log) -> None:
    argv = ["scp", "-F", str(ssh.config), "-o", "BatchMode=yes", "-q", str(source), f"{guest_mod.SSH_ALIAS}:{destination}"]
    guest_mod.run(argv, phase, log, f"copy {source.name} to the guest")


def test_workload(marker: str) -> str:
    """A web pod serving `marker`, its ClusterIP Service, and a client pod to call it from."""
    base = {"image": TEST_IMAGE, "imagePullPolicy": "Never"}
    documents = [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": WEB}, "data": {"index.html": marker + "\n"}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": WEB, "labels": {"app": WEB}},
         "spec": {"containers": [{**base, "name": "web", "command": web_command(),
                                  "ports": [{"containerPort": WEB_PORT}],
                                  "volumeMounts": [{"name": "www", "mountPath": "/www"}]}],
                  "volumes": [{"name": "www", "configMap": {"name": WEB}}]}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": WEB},
         "spec": {"type": "ClusterIP", "selector": {"app": WEB}, "ports": [{"port": 80, "targetPort": WEB_PORT}]}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": CLIENT},
         "spec": {"containers": [{**base, "name": "client", "command": ["/bin/busybox", "sleep", "86400"]}]}},
    ]
    return yaml.safe_dump_all(documents, sort_keys=False)


def test_image() -> oci_archive.Image:
    entries = cluster_images.host_entries("busybox")
    return oci_archive.Image(name=TEST_IMAGE, entries=list(entries.values()), entrypoint=["/bin/busybox"])


def networking(rendered: Path) -> dict:
    """The rendered ClusterConfiguration's networking (podSubnet, serviceSubnet, dnsDomain)."""
    for document in yaml.safe_load_all((rendered / "kubeadm" / "kubeadm-config.yaml").read_text(encoding="utf-8")):
        if (document or {}).get("kind") == "ClusterConfiguration":
            return document["networking"]
    raise E2EError(f"{rendered / 'kubeadm' / 'kubeadm-config.yaml'} has no ClusterConfiguration")


def poll(what: str, phase: Phase, check: Callable[[], tuple[bool, str]], interval: float = 2.0) -> None:
    """Poll check until it holds or the phase's deadline passes (the interval is the poll's, not a wait)."""
    last = ""
    while True:
        ok, last = check()
        if ok:
            return
        if time.monotonic() + interval >= phase.deadline:
            raise E2EError(f"{what}: not within phase '{phase.name}' ({phase.budget_s:.0f} s); last: {last}")
        time.sleep(interval)


def run(report: ClusterReport, phases: Phases, log: Log, model: Cluster, out: Path, box_file: Path, image, build_cfg,
        workdir: Path, stack: contextlib.ExitStack, started: list[int], keep: bool, netplan: bool = False) -> None:
    """The cluster steps on a fresh guest of box_file, filling report as they go (a failed run keeps
    what was measured); raises E2EError naming the step that failed. netplan: the guest has netplan
    (the Ubuntu image), so cluster-up's own step_cluster_ip (cluster-ip.sh) sets the node address."""
    cluster = load_cluster(out)
    master = cluster.master
    node = next(n for n in model.config.nodes if n.name == master.name)
    net = networking(out)
    remote: GuestRemote | None = None
    # A fresh guest: no state of an earlier run's cluster applies to it.
    (out / STATE_FILE).unlink(missing_ok=True)

    def step(name: str):
        @contextlib.contextmanager
        def timed():
            with phases.phase(name, BUDGETS[name]) as ph:
                if remote is not None:
                    remote.phase = ph
                began, status = time.monotonic(), "failed"
                try:
                    yield ph
                    status = "ok"
                except PhaseTimeout:
                    status = "timeout"
                    raise
                finally:
                    report.steps.append({"step": name, "status": status, "seconds": round(time.monotonic() - began, 1),
                                         "note": ph.note})
        return timed()

    with step("cluster images") as ph:
        names = cluster_images.required(out)
        report.substitutes = cluster_images.check_names(names)
        built = cluster_images.build(names, out / "cluster-images")
        oci_archive.write(out / "cluster-images" / "test" / cluster_images.archive_name(TEST_IMAGE), test_image())
        report.images = [{"name": b.name, "sha256": b.sha256, "bytes": b.bytes, "made_from": b.made_from} for b in built]
        ph.note = f"{len(built)} images ({sum(b.bytes for b in built) // 2**20} MiB), names from kubeadm and the Flannel manifest"

    with step("cluster boot") as ph:
        disk = guest_mod.extract_box_image(box_file, workdir / "cluster-box", ph, log)
        network = ipaddress.ip_interface(f"{master.ip}/{cluster.prefix_length}").network
        # The node's memory and CPUs from cluster.yml, as cluster-up gives its VM.
        guest = stack.enter_context(guest_mod.booted(
            disk, image.kernel, image.initrd, build_cfg.qemu.append, workdir / "cluster-guest", ph, log,
            memory_mb=node.memory, cpus=node.cpus, keep=keep,
            cluster_nic=(mac_with(cluster.cluster_mac(master), ":"), str(network))))
        started.append(guest.proc.pid)
        remote = GuestRemote(guest.ssh, log)
        remote.phase = ph
        # cluster-up's context, its remote the guest's SSH (the Vagrant driver is never called here).
        ctx = make_context(model, out, dry_run=False, remote=remote)
        ph.note = f"{node.memory} MiB, {node.cpus} vCPUs, cluster NIC on {network}"

    with step("cluster import") as ph:
        archives = [b.archive for b in built] + [out / "cluster-images" / "test" / cluster_images.archive_name(TEST_IMAGE)]
        for archive in archives:
            target = f"/tmp/{archive.name}"
            scp(guest.ssh, archive, target, ph, log)
            guest.ssh.run(f"sudo -n ctr -n k8s.io images import {shlex.quote(target)} && rm -f {shlex.quote(target)}",
                          ph, f"import {archive.name}")
        listed = guest.ssh.run("sudo -n ctr -n k8s.io images ls -q", ph, "list the imported images").stdout.split()
        missing = [n for n in [*names, TEST_IMAGE] if n not in listed]
        if missing:
            raise E2EError(f"containerd does not list the imported images {', '.join(missing)} (it lists {', '.join(listed)})")
        ph.note = f"{len(archives)} archives imported"

    with step("cluster ip") as ph:
        if netplan:
            cluster_steps.step_cluster_ip(ctx)
            how = "cluster-ip.sh (netplan)"
        else:
            _cluster_address(guest, mac_with(cluster.cluster_mac(master), ":"), f"{master.ip}/{cluster.prefix_length}", ph)
            how = "a networkd file, as netplan renders it"
        ph.note = f"{master.ip}/{cluster.prefix_length} on the NIC with MAC {mac_with(cluster.cluster_mac(master), ':')}, by {how}"

    with step("cluster init") as ph:
        cluster_steps.step_master_init(ctx)
        by_kubeadm = model.control_plane is not None
        _tcg_static_pods(guest, master.name, ph, edit=not by_kubeadm)
        ph.note = ("cluster-init.sh with the rendered kubeadm config; TCG leader-election leases " + " ".join(TCG_LEASE_FLAGS)
                   + f"; {', '.join(LIVENESS_TOLERANT)} liveness failureThreshold {TCG_LIVENESS_FAILURE_THRESHOLD}; "
                   + ("written by kubeadm from the config's extraArgs and patches" if by_kubeadm
                      else "edited into kubeadm's manifests by the harness (the config does not carry them)"))

    with step("cluster manifests") as ph:
        cluster_steps.step_manifests(ctx)
        report.checks["node Ready"] = f"node {master.name} Ready"
        ph.note = "Flannel applied, kube-proxy and CoreDNS patched, node Ready"

    with step("cluster untaint") as ph:
        taints = cluster_steps.kubectl(ctx, f"get node {master.name} -o jsonpath='{{.spec.taints[*].key}}'").split()
        if CONTROL_PLANE_TAINT in taints:
            cluster_steps.kubectl(ctx, f"taint node {master.name} {CONTROL_PLANE_TAINT}:NoSchedule-")
        ph.note = f"{CONTROL_PLANE_TAINT} removed" if CONTROL_PLANE_TAINT in taints else "no control-plane taint"

    with step("cluster rollouts") as ph:
        cluster_steps.step_rollouts(ctx)
        report.checks["rollouts"] = ", ".join(f"{kind} {ns}/{name}" for _, ns, kind, name in cluster_steps.rollouts(out))
        ph.note = "cluster-up's rollout waits passed"

    with step("cluster checks") as ph:
        report.checks.update(_checks(ctx, master, net, ph))
        ph.note = "; ".join(f"{k}: {v}" for k, v in report.checks.items() if k not in ("node Ready", "rollouts"))


def tcg_static_pod_script() -> str:
    """Scales kubeadm's static pods to an emulated CPU: TCG_LEASE_FLAGS after --leader-elect=true in each
    leader-electing manifest, and TCG_LIVENESS_FAILURE_THRESHOLD in the livenessProbe of kube-apiserver and
    etcd. The kubelet restarts a static pod whose manifest changed. A second run changes nothing; a
    manifest that is not laid out as kubeadm writes it fails the script rather than go unscaled."""
    lines = ["set -euo pipefail"]
    for component in LEADER_ELECTING:
        manifest = f"/etc/kubernetes/manifests/{component}.yaml"
        inserted = "".join(f"\\n    - {flag}" for flag in TCG_LEASE_FLAGS)
        lines += [f"grep -q -- '- --leader-elect=true$' {manifest} || {{ echo '{manifest}: no --leader-elect=true' >&2; exit 1; }}",
                  f"grep -q -- '{TCG_LEASE_FLAGS[0]}' {manifest} || sed -i 's|^    - --leader-elect=true$|&{inserted}|' {manifest}"]
    kubeadm_s, scaled = (f"      failureThreshold: {n}" for n in (KUBEADM_LIVENESS_FAILURE_THRESHOLD, TCG_LIVENESS_FAILURE_THRESHOLD))
    for component in LIVENESS_TOLERANT:
        manifest = f"/etc/kubernetes/manifests/{component}.yaml"
        # kubeadm's YAML puts failureThreshold first in the probe (fields sorted), on the line after livenessProbe:.
        lines += [f"sed -i '/^    livenessProbe:$/{{n;s/^{kubeadm_s}$/{scaled}/}}' {manifest}",
                  f"grep -A1 '^    livenessProbe:$' {manifest} | grep -qx '{scaled}' || "
                  f"{{ echo '{manifest}: no livenessProbe failureThreshold to scale' >&2; exit 1; }}"]
    return "\n".join(lines) + "\n"


def _tcg_static_pods(guest: guest_mod.Guest, node: str, ph: Phase, edit: bool) -> None:
    """Waits until the four static Pods run with the TCG settings and are Ready; edit: scale kubeadm's manifests
    first (a kubeadm config that does not carry the settings), which makes the kubelet restart them."""
    if edit:
        guest.ssh.run("sudo -n bash -s", ph, "scale the static pods' leases and liveness to TCG", input=tcg_static_pod_script())
    # cluster-up's next step must not meet a kube-apiserver that is starting (after an edit the kubelet restarts
    # the four pods): the fifth ubuntu-2604-e2e run's `kubectl apply` got `failed to download openapi: unknown`.
    pods = [f"{component}-{node}" for component in (*LEADER_ELECTING, *LIVENESS_TOLERANT)]

    def restarted() -> tuple[bool, str]:
        got = guest.ssh.run(f"kubectl -n kube-system get pod {' '.join(pods)} -o json", ph,
                            "the static pods' mirror pods", check=False)
        if got.returncode != 0:
            return False, got.stderr.strip()[-300:]
        waiting = scaled_static_pods_waiting(json.loads(got.stdout), pods)
        return not waiting, "; ".join(waiting)

    poll("the static pods with the TCG settings and Ready", ph, restarted, interval=10.0)


def scaled_static_pods_waiting(listed: dict, names: list[str]) -> list[str]:
    """What still keeps the TCG-scaled static pods (`kubectl get pod -o json` of their mirror pods, named
    NAMES) from being done: a pod not listed, one whose spec is still kubeadm's, or one not Ready yet.
    Empty when all are done."""
    items = listed.get("items", [])
    found = {pod["metadata"]["name"] for pod in items}
    waiting = [f"{name}: not listed" for name in names if name not in found]
    for pod in items:
        name, container = pod["metadata"]["name"], pod["spec"]["containers"][0]
        if name.startswith(LIVENESS_TOLERANT):
            scaled = (container.get("livenessProbe") or {}).get("failureThreshold") == TCG_LIVENESS_FAILURE_THRESHOLD
        else:
            scaled = TCG_LEASE_FLAGS[0] in container.get("command", [])
        if not scaled:
            waiting.append(f"{name}: without the TCG settings (not restarted yet after the edit, or kubeadm did not apply them)")
        elif not pod_ready(pod):
            waiting.append(f"{name}: not Ready")
    return waiting


def _cluster_address(guest: guest_mod.Guest, mac: str, address: str, ph: Phase) -> None:
    """The node's static address on the NIC with the cluster MAC, as netplan renders it for networkd."""
    text = f"# k4w e2e: the cluster NIC, static, no gateway\n[Match]\nMACAddress={mac}\n\n[Network]\nAddress={address}\nLinkLocalAddressing=no\n"
    guest.ssh.run(f"sudo -n tee {CLUSTER_NETWORK_FILE} >/dev/null && sudo -n networkctl reload", ph,
                  "configure the cluster NIC", input=text)

    def configured() -> tuple[bool, str]:
        # hostname -I: the e2e image has no iproute2 (debootstrap minbase), hostname is Essential.
        shown = guest.ssh.run("hostname -I", ph, "list the guest's addresses", quiet=True).stdout
        return address.split("/")[0] in shown.split(), shown.strip()

    poll(f"{address} on the cluster NIC {mac}", ph, configured, interval=1.0)


def _checks(ctx, master: Machine, net: dict, ph: Phase) -> dict[str, str]:
    found: dict[str, str] = {}
    kubectl = lambda args: cluster_steps.kubectl(ctx, args)  # noqa: E731 - one short alias
    left = lambda: max(1, int(ph.deadline - time.monotonic()))  # noqa: E731

    kubectl(f"-n kube-system wait --for=condition=Ready pod -l k8s-app=kube-dns --timeout={left()}s")
    found["CoreDNS Ready"] = " ".join(kubectl("-n kube-system get pods -l k8s-app=kube-dns -o name").split())

    marker = f"k4w-e2e-{secrets.token_hex(8)}"
    workload = ctx.out / "cluster-images" / "test" / "workload.yaml"
    workload.write_text(test_workload(marker), encoding="utf-8")
    path = cluster_steps.upload_linux(ctx, master, workload, "manifests/k4w-e2e-workload.yaml")
    kubectl(f"apply -f {path}")
    kubectl(f"wait --for=condition=Ready pod/{WEB} pod/{CLIENT} --timeout={left()}s")

    pod_ip = kubectl(f"get pod {WEB} -o jsonpath='{{.status.podIP}}'").strip()
    pod_cidr = ipaddress.ip_network(net["podSubnet"])
    if not pod_ip or ipaddress.ip_address(pod_ip) not in pod_cidr:
        raise E2EError(f"pod {WEB} has address {pod_ip!r}, outside the pod CIDR {pod_cidr}")
    found["pod address"] = f"{WEB} has {pod_ip} in {pod_cidr}"

    cluster_ip = kubectl(f"get service {WEB} -o jsonpath='{{.spec.clusterIP}}'").strip()
    service_cidr = ipaddress.ip_network(net["serviceSubnet"])
    if ipaddress.ip_address(cluster_ip) not in service_cidr:
        raise E2EError(f"service {WEB} has ClusterIP {cluster_ip}, outside the service CIDR {service_cidr}")

    def answers(target: str) -> Callable[[], tuple[bool, str]]:
        def check() -> tuple[bool, str]:
            try:
                body = kubectl(f"exec {CLIENT} -- {shlex.join(client_fetch(target))}")
            except RemoteError as exc:
                return False, exc.tail
            return marker in body, body[-200:]
        return check

    # kube-proxy programs the Service a moment after its endpoint is ready: poll, bounded by the step.
    poll(f"service {WEB}'s ClusterIP {cluster_ip} answering from pod {CLIENT}", ph, answers(cluster_ip))
    found["ClusterIP answers"] = f"http://{cluster_ip}/ from pod {CLIENT} returned the marker"

    name = f"{WEB}.default.svc.{net['dnsDomain']}"
    looked_up = kubectl(f"exec {CLIENT} -- /bin/busybox nslookup {name}")
    if cluster_ip not in looked_up:
        raise E2EError(f"{name} does not resolve to {cluster_ip} through cluster DNS:\n{looked_up}")
    poll(f"http://{name}/ from pod {CLIENT}", ph, answers(name))
    found["service name resolves"] = f"{name} -> {cluster_ip} through cluster DNS, and answers by name"
    return found


def plan(out: Path, box: str = BOX, netplan: bool = False) -> list[str]:
    """What --cluster would do, for --dry-run: nothing is built, booted or rendered. netplan: as run()'s."""
    tools = sorted({tool for recipe in cluster_images.RECIPES.values() for tool, _ in recipe.programs.values()})
    missing = [t for t in tools if pinned_tools.build_record(t) is None]
    lines = [
        f"cluster (then, on a fresh guest of {out / 'boxes' / (box + '-libvirt.box')} with a second NIC for the "
        f"node's cluster IP; budget {CLUSTER_BUDGET_S} s):",
        f"  images: the names `kubeadm config images list --config {out / 'kubeadm' / 'kubeadm-config.yaml'}` prints "
        f"and the images of {out / 'manifests' / 'kube-flannel.yaml'}, built as OCI archives in {out / 'cluster-images'} "
        f"from the pinned tools ({', '.join(tools)}; "
        + (f"NOT BUILT: {', '.join(missing)}: run {cluster_images.BUILD_HINT}" if missing else "all built") + ")",
        f"  import: $ sudo ctr -n k8s.io images import <archive>  (each archive, then the test image {TEST_IMAGE})",
    ]
    lines += [f"  {name} (budget {seconds} s): {what}" for (name, seconds), what in zip(BUDGETS.items(), (
        "build the image archives", "boot the guest", "import the archives",
        "the node address on the cluster NIC: " + ("cluster-up's step_cluster_ip (cluster-ip.sh, netplan)" if netplan
                                                   else "a networkd file, as netplan renders it"), "cluster-up's step_master_init: cluster-init.sh with the rendered kubeadm config and its TCG patches; "
        "then kube-apiserver, etcd, kube-controller-manager and kube-scheduler scaled to TCG and Ready",
        "cluster-up's step_manifests: the rendered Flannel manifest, patches, node Ready",
        f"remove the {CONTROL_PLANE_TAINT} taint", "cluster-up's step_rollouts: CoreDNS, kube-proxy, Flannel",
        "CoreDNS Ready; a pod's address in the pod CIDR; a Service's ClusterIP answers; its name resolves through cluster DNS"))]
    return lines


def report_json(report: ClusterReport | None) -> dict | None:
    if report is None:
        return None
    return {"box": report.box, "steps": report.steps, "total_seconds": round(sum(s["seconds"] for s in report.steps), 1),
            "stand_ins": report.stand_ins, "substitutes": report.substitutes, "checks": report.checks,
            "images": report.images}
