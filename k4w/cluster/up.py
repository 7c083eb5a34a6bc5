"""cluster-up, cluster-down and cluster-reset: the orchestration over Vagrant and the guests.

cluster_up runs the steps of steps.py in order, skipping those build/cluster-state.json records
as done; on a finished cluster it only checks (vagrant status, the switch, kubectl get nodes) and
prints the summary. Every dependency that touches the outside world (Vagrant, the guests, the
host's PowerShell, the clock) is a parameter, so tests replace them at the process boundary.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from k4w.infra import proc, ui
from k4w.infra import sources
from k4w.derive.cluster import Cluster
from k4w.infra.errors import K4wError
from . import steps as S
from .machines import cluster_vagrant, load_cluster
from .network import run_powershell, show_powershell
from .remote import DryRunRemote, cluster_remote, sh_env
from .state import State

# Steps that survive cluster-reset: the VMs, their cluster NICs and the NICs' addresses stay.
KEPT_BY_RESET = ("up", "cluster-nic", "cluster-ip")
# Run again on every cluster-up, as (step, the recorded step that makes it due, function): the cluster
# NIC once the VMs exist (Vagrant moves it to the management switch on every cold start; also a state
# file from before it was a step), and the node's static IP once it was set, on the NIC just put back.
# Both must hold after a host reboot or a `vagrant halt` + `up`; both scripts are idempotent.
# On libvirt the cluster NIC is in the domain definition from its creation, so cluster-nic only says so;
# the IP is re-applied the same way on both providers.
REAPPLIED = (("cluster-nic", "up", S.step_cluster_nic), ("cluster-ip", "cluster-ip", S.step_cluster_ip))


def artifacts_digest(out: Path) -> str:
    """What the cluster was built from: cluster.json, the kubeadm config and the node configs."""
    digest = hashlib.sha256()
    paths = [out / "vagrant" / "cluster.json", out / "kubeadm" / "kubeadm-config.yaml"]
    paths += sorted(p for p in (out / "nodes").rglob("*") if p.is_file())
    for path in paths:
        if path.is_file():
            digest.update(str(path.relative_to(out)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


class DryRunState(State):
    def save(self) -> None:  # a dry run changes nothing on disk
        pass

    def remove(self) -> None:
        pass


def _dry_answers(cluster) -> dict[str, str]:
    """The one answer a dry run needs to walk every step: a join command to parse (its token is
    a placeholder, redacted like a real one). Readiness is never pretended: waits say what they
    would wait for (steps.wait_for)."""
    if not any(m.is_master for m in cluster.machines):   # cluster.existing: the token comes from its API
        return {}
    return {
        r"kubeadm token create": f"kubeadm join {cluster.master.ip}:6443 --token abcdef.0123456789abcdef "
                                 f"--discovery-token-ca-cert-hash sha256:{'0' * 64}\n",
    }


def make_context(model: Cluster, out: Path, dry_run: bool, vagrant=None, remote=None, host=None, clock=None,
                 virsh=None, poll_seconds: float | None = None, artifacts: Path | None = None, config_changed_ok: bool = False) -> S.Context:
    """model: the resolved cluster.yml (its config and proxy). artifacts: where the rendered files are
    read; OUT itself unless a dry run passes a scratch copy of its in-memory render
    (k4w.outdir.swap.scratch_copy), so that it writes nothing under OUT."""
    out = Path(out).resolve()
    artifacts = Path(artifacts) if artifacts else out
    cluster = load_cluster(artifacts)
    digest = artifacts_digest(artifacts)
    # A dry run is the same Vagrant driver, printing the exact commands instead of running them.
    vagrant = vagrant or cluster_vagrant(artifacts, proc.Runner(dry_run=dry_run))
    if dry_run:
        state = DryRunState.load(out, digest, config_changed_ok)
        remote = remote or DryRunRemote(_dry_answers(cluster))
        host = host or show_powershell
    else:
        state = State.load(out, digest, config_changed_ok)
        remote = remote or cluster_remote(out)
        host = host or run_powershell
    clock = clock or S.Clock()
    return S.Context(cfg=model.config, proxy=model.proxy, join_timeouts=model.join_timeouts, out=out, cluster=cluster, vagrant=vagrant, remote=remote, host=host, clock=clock,
                     state=state, dry_run=dry_run, poll_seconds=model.poll_seconds if poll_seconds is None else poll_seconds, started=clock.now(), artifacts=artifacts,
                     virsh=virsh)


def refuse_gen1_windows(cluster: Cluster) -> None:
    """The cluster NIC is hot-added to running VMs (host/cluster-nic.ps1, after `vagrant up`), and
    Hyper-V hot-adds network adapters only to Generation 2 VMs: a Gen1 Windows box can be built
    and tested alone, but never joins a cluster. (A Gen1 Ubuntu VM is refused by the host script
    itself, with the same reason.) On libvirt the NIC is in the domain from its creation, and a
    generation is a Hyper-V notion: nothing to refuse."""
    if cluster.config.host.provider != "hyperv":
        return
    gen1 = [f"{box} ({prof.path.name}: build.generation {prof.data.build.get('generation')})"
            for box, prof in cluster.profiles.items()
            if prof.is_windows and prof.data.build.get("generation", 2) != 2]
    if gen1:
        raise K4wError("cluster-up needs Generation 2 Windows boxes, because the cluster NIC is hot-added and Hyper-V "
                       "allows that only on Gen2; rebuild with build.generation: 2: " + ", ".join(gen1))


def cluster_up(cluster: Cluster, out: Path, dry_run: bool = False, validate: bool = True,
               artifacts: Path | None = None, **deps) -> S.Context:
    """Bring the cluster up, resuming after the last finished step. Returns the context used."""
    out = Path(out).resolve()
    refuse_gen1_windows(cluster)
    if validate:
        from ..validate.manifest_rules import check_manifests

        problems = check_manifests(artifacts or out, cluster)
        if problems:
            raise K4wError("the rendered artifacts in " + str(out) + " fail their checks; fix these first:\n"
                           + "\n".join(f"  - {p}" for p in problems))
    api = deps.pop("api", None)
    ctx = make_context(cluster, out, dry_run, artifacts=artifacts, **deps)
    existing = None
    if cluster.config.joins_existing:   # a cluster k4w did not make: its facts first, before any VM
        from . import existing

        existing.prepare(ctx, cluster, api)
    S.step_network(ctx)
    plan = existing.step_list(ctx.cluster) if existing else S.step_list(ctx.cluster)
    finished = all(ctx.state.done(key) for key, _ in plan)
    restarted = []
    if ctx.state.done("up"):
        # VMs stopped since the last run (a host reboot leaves them off: Vagrant's Hyper-V
        # auto_start_action defaults to Nothing): start them; cluster-nic below puts each cluster
        # NIC back on its switch.
        states = ctx.vagrant.status()
        S.check_vms_are_the_recorded_ones(ctx, states)
        restarted = S.machines_not_running(ctx, states)
        if restarted:
            ui.say("==> up (dry run: machine states are not queried; a real run starts those not running)" if ctx.dry_run
                   else f"==> up (starting stopped machines: {', '.join(restarted)})", style="bold")
            S.step_up(ctx)
    reapply(ctx, REAPPLIED)
    if finished:
        if restarted:
            S.step_ready(ctx)  # a restarted node is back only once it is Ready again
            if not existing:   # an existing cluster's add-ons are its owner's
                S.step_rollouts(ctx)  # ... and its CoreDNS, kube-proxy and Flannel pods run again
        else:
            ui.say("cluster is already up: nothing else to do")
        finish(ctx)
        return ctx
    for key, step in plan:
        if ctx.state.done(key):
            continue
        ui.say(f"==> {key}", style="bold")
        started = ctx.clock.now()
        step(ctx)
        ctx.state.mark(key, ctx.clock.now() - started)
    finish(ctx)
    return ctx


def reapply(ctx: S.Context, steps) -> None:
    """Run each (step, due after, function) whose due-after step is recorded, idempotently, and record it."""
    for key, due_after, step in steps:
        if ctx.state.done(due_after):
            ui.say(f"==> {key} (re-applied on every run; unchanged where already in place)", style="bold")
            step(ctx)
            if not ctx.state.done(key):
                ctx.state.mark(key, 0.0)


def finish(ctx: S.Context) -> None:
    if ctx.dry_run:
        dry_run_summary(ctx)
    else:
        summary(ctx)


def summary(ctx: S.Context) -> list[list[str]]:
    conditions = S.node_conditions(ctx)
    if ctx.api is not None:   # an existing cluster: only k4w's nodes, and the user's own kubeconfig
        rows = [[m.name, m.os, m.ip, "Ready" if (conditions.get(m.name) or {}).get("status") == "True"
                 else S.describe_condition(conditions.get(m.name))] for m in ctx.cluster.machines]
        ui.table(f"nodes k4w joined to {ctx.api.creds.server}", ["node", "OS", "IP", "Ready"], rows)
        ui.say(f"what k4w added there is recorded in {ctx.out / 'existing-cluster.json'} (cluster-reset removes exactly that)")
        return rows
    rows = []
    for m in ctx.cluster.machines:
        cond = conditions.get(m.name)
        ready = "Ready" if cond and cond.get("status") == "True" else S.describe_condition(cond)
        seconds = ctx.state.node(m.name).get("ready_seconds")
        rows.append([m.name, m.os, m.ip, ready, "-" if seconds is None else f"{seconds:.0f}"])
    ui.table("cluster", ["node", "OS", "IP", "Ready", "seconds to Ready"], rows)
    ui.say(f"kubeconfig: {ctx.out / 'kubeconfig'}   (kubectl --kubeconfig {ctx.out / 'kubeconfig'} get nodes)")
    if ctx.cluster.windows_workers:
        entry = (ctx.cluster.linux_workers or [ctx.cluster.master])[0]
        # A NodePort is not reachable from the Windows node hosting the pod: point at a Linux node.
        ui.say(f"demo: http://{entry.ip}:{S.DEMO_NODE_PORT}/  (Windows web server behind a NodePort)")
    return rows


def dry_run_summary(ctx: S.Context) -> list[list[str]]:
    """What a dry run ends with: the plan, and what stands in its way, never a cluster that is not there."""
    rows, unbuilt = [], {}
    for m in ctx.cluster.machines:
        catalogue = Path(m.box_catalogue)
        if not catalogue.is_file():
            unbuilt[m.box] = f"`invoke {S.build_task(m)}` ({catalogue} does not exist)"
        rows.append([m.name, m.os, m.ip, m.box, "built" if catalogue.is_file() else "NOT BUILT YET"])
    ui.table("cluster-up dry run: the planned nodes (nothing was started, uploaded or written)",
             ["node", "OS", "IP", "box", "box state"], rows)
    ui.say("dry run: no VM was started, so no node is Ready and there is no kubeconfig.")
    if unbuilt:
        ui.say("boxes not built yet, so a real cluster-up would stop at `vagrant up`; build them first with "
               + "; ".join(f"{box}: {how}" for box, how in sorted(unbuilt.items())), style="yellow")
    ending = f"a real run waits up to {ctx.ready_timeout} s for every node to be Ready" + (
        "" if ctx.api is not None else f", then writes {ctx.out / 'kubeconfig'} (mode 0600)")
    if ctx.cluster.windows_workers and ctx.api is None:
        entry = (ctx.cluster.linux_workers or [ctx.cluster.master])[0]
        ending += f" and serves the demo at http://{entry.ip}:{S.DEMO_NODE_PORT}/"
    ui.say(ending)
    return rows


def cluster_down(cluster: Cluster, out: Path, dry_run: bool = False, vagrant=None, api=None) -> None:
    """Destroy every VM of the cluster and forget its state; on a cluster k4w did not make, also
    delete its Node objects and the objects it recorded there (k4w.cluster.existing)."""
    out = Path(out).resolve()
    load_cluster(out)  # says "run `invoke render` first" when there is nothing to destroy from
    (vagrant or cluster_vagrant(out, proc.Runner(dry_run=dry_run))).destroy()
    if cluster.config.joins_existing:
        from . import existing

        for line in existing.remove(api or existing.client(cluster), out, dry_run=dry_run):
            ui.say(line)
    if dry_run:
        ui.say(f"would remove {out / 'cluster-state.json'} and {out / 'kubeconfig'}")
        return
    (out / "cluster-state.json").unlink(missing_ok=True)
    (out / "kubeconfig").unlink(missing_ok=True)
    ui.say("cluster destroyed")


def cluster_reset(cluster: Cluster, out: Path, dry_run: bool = False, **deps) -> None:
    """Undo kubeadm on every node (VMs and their cluster IPs stay); cluster-up then re-creates it.
    It works after a config change too: that is when cluster-up sends you here. On a cluster k4w did
    not make, the Node objects and objects it recorded are deleted through the API, nothing else."""
    api = deps.pop("api", None)
    ctx = make_context(cluster, out, dry_run, config_changed_ok=True, **deps)
    not_running = S.machines_not_running(ctx)
    if not_running and not dry_run:
        raise K4wError(f"cluster-reset needs the VMs running; not running: {', '.join(not_running)} (run `invoke cluster-up`)")
    # The cluster is rebuilt on the VMs as they are now, so these become the recorded ones, even
    # if one was re-created outside cluster-up (the way out cluster-up names).
    S.record_vm_ids(ctx)
    # The VMs run, but nothing says who started them: a `vagrant up` or `vagrant reload` typed by hand
    # (or Hyper-V's own start after a host reboot through Vagrant) moved every NIC to the management
    # switch (VagrantVM.psm1 Set-VagrantVMSwitch, hashicorp/vagrant v2.3.4). Put each cluster NIC back
    # before any guest step, as cluster-up does; not the static IPs (cluster-ip): after a config change
    # they are the new config's, and the reset still talks to the cluster that has the old ones.
    reapply(ctx, [entry for entry in REAPPLIED if entry[0] == "cluster-nic"])
    workers = [m for m in ctx.cluster.machines if not m.is_master]
    if cluster.config.joins_existing:
        from . import existing

        api = api or existing.client(cluster)
        masters, vxlan_device = [], existing.vxlan_device(cluster)
    else:
        masters, vxlan_device = [ctx.cluster.master], S.flannel_vxlan_device(ctx.out)
        if ctx.state.done("master-init"):
            for m in workers:  # so a re-join registers a fresh Node object
                S.kubectl(ctx, f"delete node {m.name} --ignore-not-found")
    for m in workers + masters:
        S.prepare_dirs(ctx, m)
        if m.is_windows:
            from ..render import escape

            script = S.upload_windows(ctx, m, sources.REPO.guest / "windows" / "cluster" / "cluster-reset.ps1")
            ctx.remote.run(m, f"& {escape.ps(script)}")
        else:
            script = S.upload_linux(ctx, m, sources.REPO.guest / "ubuntu" / "cluster" / "cluster-reset.sh")
            ctx.remote.run(m, f"sudo {sh_env(K4W_FLANNEL_VXLAN_DEVICE=vxlan_device)} bash {script}")
    if cluster.config.joins_existing:
        # After the nodes' own reset, so no kubelet registers its Node again once it is deleted.
        for line in existing.remove(api, ctx.out, dry_run=dry_run):
            ui.say(line)
    ctx.state.clear_after(KEPT_BY_RESET)
    if not dry_run:
        (ctx.out / "kubeconfig").unlink(missing_ok=True)
    ui.say("cluster reset: run `invoke cluster-up` to create it again on the same VMs")
