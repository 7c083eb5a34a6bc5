"""`invoke e2e --provider libvirt --cluster`: k4w's own commands, unchanged, on a two-node cluster in libvirt VMs.

After the bake of the box (run.py's phases up to the proxy proof: the same box the QEMU run checks), this
runs the commands a user types, as subprocesses (`invoke <task> --config ... --out ...`), on a cluster.yml
with host.provider libvirt (cluster_yml below): two nodes of the baked box, Flannel vxlan, the containerd era.
Nothing of cluster-up is called in-process and nothing is done to a guest between the commands: what the
report says passed is what a user's run does.

    network-up        the two libvirt networks (management, cluster)
    registries        real OCI registries (CNCF distribution) on the management network's host address,
                      one per upstream, holding the images the cluster pulls (no registry is reachable
                      from CI): they are the cluster.yml's registry.mirrors, which cluster-up configures on
                      every node (containerd's hosts.toml), so every image comes through k4w's mirror path
    cluster-up        vagrant up of both VMs, kubeadm init and join, Flannel, the rollouts
    cluster-test      the Linux rows of the matrix: pod to pod across the nodes, Service and DNS from each
    cluster-reset     kubeadm reset on every node; the VMs stay
    cluster-up again  the same command; the VMs must be the same domains (their UUIDs), not new ones
    existing join     a second cluster.yml (cluster.existing = the first cluster's admin kubeconfig) adds a
                      third VM as a worker of that cluster
    existing reset    its cluster-reset: the third node leaves, the first cluster's nodes stay Ready
    existing down     its cluster-down: the third VM is gone
    cluster-down      the first cluster's VMs are gone

report.json's `libvirt` holds each command's seconds, exit code and checks, and `stand_ins`.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from k4w import render
from k4w.cluster import libvirt_network as lvnet
from k4w.commands import doctor_libvirt
from k4w.derive.cluster import Cluster
from k4w.infra import pinned_tools, proc
from k4w.model import config as config_mod
from . import cluster_images, registry
from .phases import E2EError, Log, Phase, Phases

PROVIDER = "libvirt"
# The run leaves libvirt.uri at its default, so the run's own virsh calls go where cluster-up's do.
LIBVIRT_URI = config_mod.Libvirt.model_fields["uri"].default
# Where `invoke` finds tasks.py: the repository root.
REPO_ROOT = Path(__file__).resolve().parents[2]
# The CI box whose guest has netplan (real Ubuntu 26.04), so cluster-up's own cluster-ip.sh gives the
# cluster NIC its address; the Debian 12 stand-in has networkd alone (cluster_run.py says why).
BOX = "ubuntu-2604-e2e"
CLUSTER_NAME = "k4w-e2e"
EXISTING_NAME = "k4w-e2e-x"
# Networks of their own, so a user's k4w networks on this host are never touched; private ranges that
# the defaults of cluster.yml (192.168.250.0/24, 192.168.123.0/24) and libvirt's default (192.168.122.0/24)
# do not use.
MANAGEMENT_NETWORK = "k4w-e2e-management"
MANAGEMENT_CIDR = "192.168.124.0/24"
MANAGEMENT_HOST = "192.168.124.1"
CLUSTER_NETWORK = "k4w-e2e-cluster"
NODE_CIDR = "192.168.251.0/24"
# (name, role, cluster address, MB, vCPUs). kubeadm init needs 2 CPUs on the master (its NumCPU preflight); a
# worker gets 1: under TCG each vCPU is a host thread, and the second run's four on 2 host cores starved the
# master's kube-apiserver during the worker's join (docs/linux-host.md "Measured here").
NODES = (("master", "master", "192.168.251.10", 3072, 2), ("worker", "worker", "192.168.251.11", 2048, 1))
EXISTING_NODE = ("worker-x", "worker", "192.168.251.12", 2048, 1)
# Seconds, per command, from the runs quoted in docs/linux-host.md, with margin; each command is stopped
# (its process group) when its budget runs out.
BUDGETS = {
    "network-up": 120,
    "registries": 900,
    "cluster-up": 7200,
    "cluster-test": 2400,
    "cluster-reset": 1200,
    "cluster-up again": 5400,
    "existing join": 5400,
    "existing reset": 1200,
    "existing down": 600,
    "cluster-down": 600,
}
LIBVIRT_BUDGET_S = sum(BUDGETS.values())
# Under TCG two nodes need more than kubeadm's default 4 minutes; cluster-up waits this long for each node.
READY_TIMEOUT_S = 2400


@dataclass
class CommandRun:
    command: str
    argv: list[str]
    seconds: float
    returncode: int
    log: str


@dataclass
class LibvirtReport:
    """report.json's `libvirt`: every command by the name a user types, its seconds, result and checks."""

    provider: str = PROVIDER
    box: str = BOX
    ok: bool = False
    phases: list[dict] = field(default_factory=list)
    checks: dict[str, str] = field(default_factory=dict)
    stand_ins: list[str] = field(default_factory=list)
    substitutes: dict[str, dict] = field(default_factory=dict)
    domains: dict[str, str] = field(default_factory=dict)


# The tasks that have no output folder (tasks.py): they change the host, not OUT.
HOST_TASKS = ("network-up",)


def invoke_argv(task: str, config: Path, out: Path) -> list[str]:
    """The command a user types, with this run's Python environment's invoke."""
    invoke = Path(sys.executable).with_name("invoke")
    return [str(invoke), task, "--config", str(config), *(() if task in HOST_TASKS else ("--out", str(out)))]


def k4w_command(task: str, config: Path, out: Path, phase: Phase, log: Log, box_dirs: Path,
                name: str | None = None, report: "LibvirtReport | None" = None) -> CommandRun:
    """Run `invoke TASK` as a user would, from the repository root, its output into the run's log and a
    log of its own; bounded by the phase's budget (the whole process group is stopped at the deadline)."""
    argv = invoke_argv(task, config, out)
    env = command_env(out, box_dirs)
    own_log = out / "logs" / f"e2e-{(name or task).replace(' ', '-')}.log"
    own_log.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    log.write(f"$ {' '.join(argv)}\n")
    with own_log.open("w", encoding="utf-8") as copy:
        def line(text: str) -> None:
            copy.write(text)
            copy.flush()
            log.write(text)
        try:
            done = proc.stream(argv, line, cwd=REPO_ROOT, env=env, timeout=phase.remaining(task), group=True)
        except proc.TimedOut:
            raise phase.timeout_error(f"`invoke {task}` ran") from None
    run = CommandRun(name or task, argv, time.monotonic() - started, done.returncode, str(own_log))
    if report is not None:
        # Recorded before its checks and whether or not it passed: a failed command's seconds and exit code
        # are what the next run is planned from.
        _record(report, run)
    if done.returncode != 0:
        raise E2EError(f"`invoke {task} --config {config}` failed with exit code {done.returncode} after "
                       f"{run.seconds:.0f} s; its output: {own_log}\n{proc.tail(done.stdout)}")
    return run


def command_env(out: Path, box_dirs: Path) -> dict[str, str]:
    """The environment of every `invoke` the run types. K4W_BOX_DIRS: the CI box profiles
    (k4w.infra.sources). VAGRANT_HOME: where `vagrant box add` unpacks the box; the CI box boots its kernel
    directly from there (vagrant/box/ubuntu.Vagrantfile), and libvirt's QEMU runs as its own user, which
    cannot enter root's 0700 home."""
    return {**os.environ, "K4W_BOX_DIRS": str(box_dirs), "VAGRANT_HOME": str(vagrant_home(out))}


def vagrant_home(out: Path) -> Path:
    """One Vagrant home for every command of the run (both clusters share the box it holds)."""
    home = out.parent / "vagrant-home"
    home.mkdir(parents=True, exist_ok=True)
    return home


def cluster_yml(*, name: str, nodes, box: str, registry: dict, existing: Path | None = None) -> str:
    """The cluster.yml of the run, as a Linux user with an emulated CPU writes it: host.provider libvirt,
    accelerator tcg (KVM hangs guests on the CI hosts), the run's own networks, isolated (management_forward
    none: nothing leaves this host), vxlan, the registries as mirrors."""
    document = {
        "cluster": {"name": name, "ready_timeout": READY_TIMEOUT_S, **({"existing": str(existing)} if existing else {})},
        "host": {"provider": PROVIDER},
        "libvirt": {"accelerator": "tcg", "management_network": MANAGEMENT_NETWORK, "management_cidr": MANAGEMENT_CIDR,
                    "management_forward": "none", "cluster_network": CLUSTER_NETWORK},
        "network": {"node_cidr": NODE_CIDR, "backend": "vxlan"},
        "registry": registry,
        "nodes": [{"name": n, "role": role, "box": box, "ip": ip, "cpus": cpus, "memory": memory}
                  for n, role, ip, memory, cpus in nodes],
    }
    return "# k4w end-to-end run on libvirt (ci/e2e/libvirt_run.py)\n" + yaml.safe_dump(document, sort_keys=False)


def require_host() -> None:
    """libvirtd answers and Vagrant has the libvirt provider, checked in the run's first phase rather than
    after the bake, by the same checks `invoke doctor` makes."""
    failed = [check for check in (doctor_libvirt.reachable_check(lvnet.Virsh(LIBVIRT_URI)),
                                  doctor_libvirt.vagrant_libvirt_check()) if not check.ok]
    if failed:
        raise E2EError("; ".join(f"{check.name}: {check.detail} (fix: {check.fix})" for check in failed))


def domain_uuids(cluster: str, nodes) -> dict[str, str]:
    """{domain name: UUID} of the cluster's domains that exist (the Vagrantfile names them <cluster.name>-<node>)."""
    wanted = {f"{cluster}-{n[0]}" for n in nodes}
    virsh = lvnet.Virsh(LIBVIRT_URI)
    return {n: virsh.ok("domuuid", n).strip() for n in virsh.ok("list", "--all", "--name").split() if n in wanted}


def kubectl(out: Path, *args: str, timeout: float = 120) -> str:
    """kubectl on the host with the cluster's admin kubeconfig (cluster-up writes OUT/kubeconfig)."""
    # The pinned kubectl (tools/lock.yml), never whichever one PATH has: its version is the cluster's.
    tool = pinned_tools.require("kubernetes-node", "kubectl")
    done = proc.run([str(tool), "--kubeconfig", str(out / "kubeconfig"), *args], timeout=timeout)
    if done.returncode != 0:
        raise E2EError(f"kubectl {' '.join(args)}: {done.stdout}{done.stderr}".strip())
    return done.stdout


def nodes_ready(out: Path) -> dict[str, bool]:
    items = json.loads(kubectl(out, "get", "nodes", "-o", "json"))["items"]
    return {item["metadata"]["name"]: any(c["type"] == "Ready" and c["status"] == "True"
                                          for c in item["status"]["conditions"]) for item in items}


def _record(report: LibvirtReport, run: CommandRun, checks: dict[str, str] | None = None) -> None:
    """One command in report.phases; called again with its checks, it fills in the same entry."""
    entry = {"command": run.command, "argv": run.argv[1:], "seconds": round(run.seconds, 1),
             "exit_code": run.returncode, "log": run.log, "checks": checks or {}}
    if report.phases and report.phases[-1]["log"] == run.log:
        report.phases[-1] = entry
    else:
        report.phases.append(entry)


def _check(report: LibvirtReport, name: str, ok: bool, found: str) -> str:
    report.checks[name] = ("ok: " if ok else "FAILED: ") + found
    if not ok:
        raise E2EError(f"check '{name}' failed: {found}")
    return found


def _test_results(out: Path) -> dict[str, str]:
    """What cluster-test's suites reported (OUT/reports/cluster-test-*.json), per suite: passed/failed counts."""
    found = {}
    for path in sorted((out / "reports").glob("cluster-test-*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        summary = data.get("summary", data)
        found[path.stem] = ", ".join(f"{k} {v}" for k, v in summary.items() if isinstance(v, int))
    return found


# What a failed run keeps of each Linux guest before its VM goes: the kubelet's view, the addresses, and the last
# lines of every container's log (the third run's kubeadm init gave up waiting for kube-apiserver, and the VMs
# were gone before anyone could ask why). The boxes have no crictl (k4w installs none on Linux), so the logs
# are read where the kubelet writes them: /var/log/pods/<namespace>_<pod>_<uid>/<container>/<restart>.log
# (the kubelet's CRI log layout). Read-only, bounded as a whole by DIAGNOSTICS_TIMEOUT_S, never fails the teardown.
GUEST_DIAGNOSTICS = ("uptime; free -m; df -h /; ip -br addr; ip route; ls -l /run/flannel /etc/cni/net.d; "
                     "journalctl -u kubelet -u containerd --no-pager -n 300; "
                     "for f in /var/log/pods/*/*/*.log; do echo \"== $f\"; tail -n 60 \"$f\"; done")
DIAGNOSTICS_TIMEOUT_S = 600


def collect_diagnostics(out: Path, box_dirs: Path, log: Log) -> list[Path]:
    """Each Linux node's GUEST_DIAGNOSTICS into OUT/logs/diagnostics-<node>.log, through the cluster's own
    Vagrant environment and the remote cluster-up reaches the node with."""
    from k4w.cluster.machines import load_cluster
    from k4w.cluster.remote import cluster_remote

    written = []
    remote = cluster_remote(out, timeout=DIAGNOSTICS_TIMEOUT_S)
    remote.vagrant.env.update({k: v for k, v in command_env(out, box_dirs).items() if k in ("VAGRANT_HOME", "K4W_BOX_DIRS")})
    for machine in load_cluster(out).machines:
        if machine.is_windows:
            continue
        path = out / "logs" / f"diagnostics-{machine.name}.log"
        try:
            text = remote.run(machine, f"sudo sh -c {shlex.quote(GUEST_DIAGNOSTICS + ' 2>&1')} || true")
        except Exception as exc:  # noqa: BLE001 - a node that does not answer is itself the finding
            text = f"could not reach {machine.name}: {exc}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        log.write(f"diagnostics of {machine.name}: {path}\n")
        written.append(path)
    return written


def down_after_failure(report: LibvirtReport, clusters: list[tuple[Path, Path]], box_dirs: Path, log: Log) -> None:
    """On a failed run, each cluster's own `invoke cluster-down` (its domains go, the networks stay), so the
    next run starts clean and no emulated VM keeps the cores busy; first each node's diagnostics
    (collect_diagnostics), since the VMs take their logs with them. --keep leaves them for a look."""
    if report.ok:
        return
    for config, out in clusters:
        if not config.is_file() or not (out / "vagrant" / "cluster.json").is_file():
            continue
        try:
            collect_diagnostics(out, box_dirs, log)
        except Exception as exc:  # noqa: BLE001 - the teardown must still run
            log.write(f"diagnostics of {out} not collected: {exc}\n")
        argv = invoke_argv("cluster-down", config, out)
        env = command_env(out, box_dirs)
        log.write(f"$ {' '.join(argv)}   # the run failed: its VMs go\n")
        try:
            done = proc.run(argv, cwd=REPO_ROOT, env=env, timeout=BUDGETS["cluster-down"])
            log.write(done.stdout + done.stderr)
        except proc.TimedOut:
            log.write(f"cluster-down of {config} did not finish in {BUDGETS['cluster-down']} s\n")


def run(report: LibvirtReport, phases: Phases, log: Log, out: Path, boxes: Path, box_dirs: Path, workdir: Path,
        registries, stack, keep: bool = False) -> None:
    """The commands, in order, filling report as they go (a failed run keeps what was measured).

    boxes: the bake's OUT/boxes (the box catalogue cluster-up adds the box from). registries: a callable
    (listen address, phase, log) -> (registry block for cluster.yml, stand_ins, substitutes, stop), the run's
    image mirrors (ci/e2e/registry.py)."""
    first, second = out / "cluster", out / "existing"
    for folder in (first, second):
        folder.mkdir(parents=True, exist_ok=True)
        link = folder / "boxes"
        if not link.exists():
            link.symlink_to(boxes, target_is_directory=True)
    config = workdir / "cluster.yml"
    existing = workdir / "existing.yml"
    if not keep:
        # Registered first, so it runs last: after the registries stopped, the VMs go too.
        stack.callback(down_after_failure, report, [(existing, second), (config, first)], box_dirs, log)

    with phases.phase("network-up", BUDGETS["network-up"]) as ph:
        # The registry block is not known yet; network-up reads only host, libvirt and network.
        config.write_text(cluster_yml(name=CLUSTER_NAME, nodes=NODES, box=BOX, registry={"mirrors": {}}), encoding="utf-8")
        _record(report, k4w_command("network-up", config, first, ph, log, box_dirs, report=report))
        ph.note = f"{MANAGEMENT_NETWORK} {MANAGEMENT_CIDR}, {CLUSTER_NETWORK} {NODE_CIDR}"

    with phases.phase("registries", BUDGETS["registries"]) as ph:
        mirrors, stand_ins, substitutes = registries(MANAGEMENT_HOST, ph, log, stack, config)
        report.stand_ins, report.substitutes = stand_ins, substitutes
        block = mirrors.registry_block()
        config.write_text(cluster_yml(name=CLUSTER_NAME, nodes=NODES, box=BOX, registry=block), encoding="utf-8")
        log.write(f"# {config}:\n{config.read_text()}")
        before = mirrors.request_counts()
        ph.note = f"{len(block['mirrors'])} mirrors on {MANAGEMENT_HOST}"

    with phases.phase("cluster-up", BUDGETS["cluster-up"]) as ph:
        run = k4w_command("cluster-up", config, first, ph, log, box_dirs, report=report)
        ready = nodes_ready(first)
        checks = {"nodes Ready": _check(report, "cluster-up: nodes Ready", ready == {n[0]: True for n in NODES},
                                        json.dumps(ready))}
        report.domains = domain_uuids(CLUSTER_NAME, NODES)
        checks["domains"] = _check(report, "cluster-up: two domains", len(report.domains) == len(NODES),
                                   json.dumps(report.domains))
        _record(report, run, checks)
        report.checks["cluster-up: image requests to the mirrors"] = f"{mirrors.request_count(since=before)}"
        ph.note = f"{len(ready)} nodes Ready"

    with phases.phase("cluster-test", BUDGETS["cluster-test"]) as ph:
        try:
            run = k4w_command("cluster-test", config, first, ph, log, box_dirs, report=report)
        finally:
            results = _test_results(first)
            report.checks.update({f"cluster-test: {k}": v for k, v in results.items()})
        _record(report, run, results)
        ph.note = "; ".join(f"{k}: {v}" for k, v in results.items())

    with phases.phase("cluster-reset", BUDGETS["cluster-reset"]) as ph:
        run = k4w_command("cluster-reset", config, first, ph, log, box_dirs, report=report)
        after = domain_uuids(CLUSTER_NAME, NODES)
        checks = {"VMs kept": _check(report, "cluster-reset: the VMs stay", after == report.domains, json.dumps(after))}
        _record(report, run, checks)

    with phases.phase("cluster-up again", BUDGETS["cluster-up again"]) as ph:
        run = k4w_command("cluster-up", config, first, ph, log, box_dirs, name="cluster-up again", report=report)
        after = domain_uuids(CLUSTER_NAME, NODES)
        ready = nodes_ready(first)
        checks = {"same domains": _check(report, "cluster-up again: no VM recreated", after == report.domains,
                                         json.dumps(after)),
                  "nodes Ready": _check(report, "cluster-up again: nodes Ready", ready == {n[0]: True for n in NODES},
                                        json.dumps(ready))}
        _record(report, run, checks)

    with phases.phase("existing join", BUDGETS["existing join"]) as ph:
        existing.write_text(cluster_yml(name=EXISTING_NAME, nodes=(EXISTING_NODE,), box=BOX, registry=block,
                                        existing=first / "kubeconfig"), encoding="utf-8")
        run = k4w_command("cluster-up", existing, second, ph, log, box_dirs, name="existing join", report=report)
        ready = nodes_ready(first)
        wanted = {n[0]: True for n in (*NODES, EXISTING_NODE)}
        checks = {"three nodes Ready": _check(report, "existing join: three nodes Ready", ready == wanted, json.dumps(ready))}
        _record(report, run, checks)

    with phases.phase("existing reset", BUDGETS["existing reset"]) as ph:
        run = k4w_command("cluster-reset", existing, second, ph, log, box_dirs, name="existing reset", report=report)
        ready = nodes_ready(first)
        checks = {"only its node left": _check(report, "existing reset: the first cluster's nodes stay, worker-x is gone",
                                               ready == {n[0]: True for n in NODES}, json.dumps(ready))}
        _record(report, run, checks)

    with phases.phase("existing down", BUDGETS["existing down"]) as ph:
        run = k4w_command("cluster-down", existing, second, ph, log, box_dirs, name="existing down", report=report)
        left = domain_uuids(EXISTING_NAME, (EXISTING_NODE,))
        _record(report, run, {"domain gone": _check(report, "existing down: its VM is gone", not left, json.dumps(left))})

    with phases.phase("cluster-down", BUDGETS["cluster-down"]) as ph:
        run = k4w_command("cluster-down", config, first, ph, log, box_dirs, report=report)
        left = domain_uuids(CLUSTER_NAME, NODES)
        _record(report, run, {"domains gone": _check(report, "cluster-down: its VMs are gone", not left, json.dumps(left))})
    report.ok = True


def registries_for(workdir: Path, out: Path):
    """The run's image mirrors (ci/e2e/registry.py): started on the management network's host address once
    network-up made it, holding every image the rendered cluster pulls (kubeadm's list, Flannel's manifest)
    and the two cluster-test pulls (workload_images: a stand-in and a substitute, named in the report)."""

    def start(address: str, phase: Phase, log: Log, stack, config: Path):
        scratch = workdir / "images-render"
        cluster = Cluster.resolve(config_mod.load(config), config)
        render.render(cluster, scratch)
        names = cluster_images.required(scratch)
        substitutes = cluster_images.check_names(names)
        built = cluster_images.build(names, out / "cluster-images")
        workloads, made = registry.workload_images(out / "cluster-images" / "workloads")
        mirrors = stack.enter_context(registry.serving(address, workdir / "registries"))
        pushed = mirrors.push_archives([*built, *workloads])
        log.write("".join(f"pushed {name} {digest}\n" for name, digest in pushed.items()))
        stand_ins = [f"{name}: {what['what']}" for name, what in made.items() if what.get("kind") == "stand-in"]
        substitutes.update({name: what for name, what in made.items() if what.get("kind") != "stand-in"})
        return mirrors, stand_ins, substitutes

    return start
