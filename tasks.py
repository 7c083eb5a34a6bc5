"""k4w tasks. Each one parses arguments and calls the k4w package; no logic lives here.

Run `invoke --list` for the tasks and `invoke --help TASK` for a task's options.
"""

from invoke import task
from invoke.exceptions import Exit

from pathlib import Path

from k4w import cli, doctor as doctor_mod, plan as plan_mod, ui

CONFIG_HELP = "cluster definition to use (default: cluster.yml)"
OUT_HELP = "folder for rendered artifacts, boxes, logs and state (default: build)"
DRY_HELP = "print the exact commands this would run, change nothing"
BUILD_HELP = {
    "config": CONFIG_HELP,
    "out": OUT_HELP,
    "dry_run": DRY_HELP,
    "force": "rebuild even when the box is up to date",
    "iso": "use this ISO file instead of iso/<iso.name from the box profile>; its sha256 must still match",
}


@task(help={"config": CONFIG_HELP, "out": OUT_HELP, "dry_run": DRY_HELP})
@cli.user_errors
def render(c, config=cli.DEFAULT_CONFIG, out=cli.DEFAULT_OUT, dry_run=False):
    """Render every artifact (Packer, answer files, manifests, cluster.json) from the config."""
    if dry_run:
        cfg = cli.load(config)
        ui.say(f"would render {config} into {out} (config is valid: {len(cfg.config.nodes)} nodes, boxes {', '.join(cfg.profiles)})")
        return
    cli.do_render(config, out)


@task(help={"config": CONFIG_HELP, "out": OUT_HELP, "dry_run": DRY_HELP})
@cli.user_errors
def validate(c, config=cli.DEFAULT_CONFIG, out=cli.DEFAULT_OUT, dry_run=False):
    """Render, then check each artifact with the real tool that consumes it."""
    if dry_run:
        ui.say("would render, then run: packer validate, debconf-set-selections --checkonly, shellcheck, "
               "tree-sitter-powershell parse, Autounattend structural rules, kubernetes-validate, ruby -c")
        return
    cfg, out_path, _ = cli.do_render(config, out)
    if not cli.do_validate(cfg, out_path):
        raise Exit("validation failed", code=1)


@task(help={"config": CONFIG_HELP, "out": OUT_HELP, "dry_run": DRY_HELP})
@cli.user_errors
def plan(c, config=cli.DEFAULT_CONFIG, out=cli.DEFAULT_OUT, dry_run=False):
    """Render and show what build and cluster-up would do: nodes, derived values, commands."""
    cfg, out_path, files = cli.do_render(config, out, quiet=dry_run)
    plan_mod.show(cfg, out_path, files)


@task(help={"config": CONFIG_HELP, "out": OUT_HELP, "stage": "validate, build or cluster: which checks must pass (default build)",
            "dry_run": DRY_HELP})
@cli.user_errors
def doctor(c, config=cli.DEFAULT_CONFIG, out=cli.DEFAULT_OUT, stage="build", dry_run=False):
    """Check this host before a long step: Hyper-V, rights, tools, switches, ISOs, disk, proxy."""
    if stage not in doctor_mod.STAGES:
        raise Exit(f"--stage must be one of {', '.join(doctor_mod.STAGES)}", code=2)
    cfg = cli.load(config)
    checks = doctor_mod.run(cfg, Path(out))
    rows, failed = [], 0
    for chk in checks:
        required = chk.required_for(stage)
        mark = "ok" if chk.ok else ("FAIL" if required else "warn")
        failed += (not chk.ok) and required
        rows.append([mark, chk.name, chk.detail, "" if chk.ok else chk.fix])
    ui.table(f"doctor (stage: {stage})", ["", "check", "found", "fix"], rows)
    if failed:
        raise Exit(f"{failed} check(s) required for '{stage}' failed", code=1)
    ui.say(f"ready for {stage}")


@task(name="all", help={"config": CONFIG_HELP, "out": OUT_HELP, "dry_run": DRY_HELP})
@cli.user_errors
def all_(c, config=cli.DEFAULT_CONFIG, out=cli.DEFAULT_OUT, dry_run=False):
    """The main job: render + validate + plan; on a Hyper-V host, then build both boxes."""
    cfg, out_path, files = cli.do_render(config, out)
    if not cli.do_validate(cfg, out_path):
        raise Exit("validation failed", code=1)
    plan_mod.show(cfg, out_path, files)
    blocking = [chk for chk in doctor_mod.host_checks() if not chk.ok]
    if blocking:
        ui.say(f"\nnot building: {blocking[0].detail}. The plan above is what a Hyper-V host runs.", style="yellow")
        return
    ui.say("\nHyper-V host detected: building the boxes", style="bold")
    from k4w.bake import commands

    commands.build(cfg, out_path, dry_run=dry_run, console=ui.console)


@task(name="network-up", help={"config": CONFIG_HELP, "dry_run": "print the PowerShell, change nothing"})
@cli.user_errors
def network_up(c, config=cli.DEFAULT_CONFIG, dry_run=False):
    """Create the Hyper-V cluster switch, host gateway address and NetNat (idempotent; as Administrator)."""
    from k4w import cluster

    cluster.network_up(cli.load(config).config, dry_run=dry_run)


@task(name="cluster-up", help={"config": CONFIG_HELP, "out": OUT_HELP, "dry_run": DRY_HELP})
@cli.user_errors
def cluster_up(c, config=cli.DEFAULT_CONFIG, out=cli.DEFAULT_OUT, dry_run=False):
    """Bring up the hybrid cluster: VMs, kubeadm, Flannel, joins, demo; resumes after a failure."""
    from k4w import cluster

    cfg, out_path, _ = cli.do_render(config, out)
    cluster.cluster_up(cfg, out_path, dry_run=dry_run)


@task(name="cluster-down", help={"config": CONFIG_HELP, "out": OUT_HELP, "dry_run": DRY_HELP})
@cli.user_errors
def cluster_down(c, config=cli.DEFAULT_CONFIG, out=cli.DEFAULT_OUT, dry_run=False):
    """Destroy the cluster's VMs and forget its state."""
    from k4w import cluster

    cluster.cluster_down(cli.load(config), Path(out).resolve(), dry_run=dry_run)


@task(name="cluster-reset", help={"config": CONFIG_HELP, "out": OUT_HELP, "dry_run": DRY_HELP})
@cli.user_errors
def cluster_reset(c, config=cli.DEFAULT_CONFIG, out=cli.DEFAULT_OUT, dry_run=False):
    """Undo kubeadm on every node and stop the Windows services, keeping the VMs and their IPs."""
    from k4w import cluster

    cluster.cluster_reset(cli.load(config), Path(out).resolve(), dry_run=dry_run)


@task(name="build-windows", help=BUILD_HELP)
@cli.user_errors
def build_windows(c, config=cli.DEFAULT_CONFIG, out=cli.DEFAULT_OUT, iso=None, force=False, dry_run=False):
    """Build the Windows Server box with Packer (skipped when up to date); log in OUT/logs/<box>.log."""
    from k4w.bake import commands

    commands.build(cli.load(config), Path(out), node_os="windows", iso=iso, force=force, dry_run=dry_run, console=ui.console)


@task(name="build-ubuntu", help=BUILD_HELP)
@cli.user_errors
def build_ubuntu(c, config=cli.DEFAULT_CONFIG, out=cli.DEFAULT_OUT, iso=None, force=False, dry_run=False):
    """Build the Ubuntu box with Packer (skipped when up to date); log in OUT/logs/<box>.log."""
    from k4w.bake import commands

    commands.build(cli.load(config), Path(out), node_os="linux", iso=iso, force=force, dry_run=dry_run, console=ui.console)


@task(help={k: v for k, v in BUILD_HELP.items() if k != "iso"})
@cli.user_errors
def build(c, config=cli.DEFAULT_CONFIG, out=cli.DEFAULT_OUT, force=False, dry_run=False):
    """Build every box the config uses, in parallel; a summary table names each log."""
    from k4w.bake import commands

    commands.build(cli.load(config), Path(out), force=force, dry_run=dry_run, console=ui.console)


@task(name="iso-add", help={"path": "the ISO file you have",
                            "box": "box profile it is for (default: the profile whose iso.name equals the file name)"})
@cli.user_errors
def iso_add(c, path, box=None):
    """Record an ISO's sha256 in iso/catalogue.yml and hard-link it into iso/ (no silent copy across drives)."""
    from k4w.bake import commands

    commands.add_iso(path, box, console=ui.console)


@task(name="test-box", help={"box": "box profile to test, e.g. ubuntu-1604 or windows-1803", "config": CONFIG_HELP,
                             "out": OUT_HELP, "dry_run": DRY_HELP})
@cli.user_errors
def test_box(c, box, config=cli.DEFAULT_CONFIG, out=cli.DEFAULT_OUT, dry_run=False):
    """Boot a throwaway VM from OUT/boxes/<box>.json, run its testinfra spec, destroy it, record the result."""
    from k4w.verify import flows

    flows.test_box(cli.load(config), box, Path(out), dry_run=dry_run)


@task(name="cluster-test", help={"config": CONFIG_HELP, "out": OUT_HELP, "dry_run": DRY_HELP})
@cli.user_errors
def cluster_test(c, config=cli.DEFAULT_CONFIG, out=cli.DEFAULT_OUT, dry_run=False):
    """Node specs on every node, then nodes, system pods and the connectivity matrix; reports in OUT/reports/."""
    from k4w.verify import flows

    flows.cluster_test(cli.load(config), Path(out), dry_run=dry_run)


@task(help={"out": "e2e folder: base-image cache, rendered files, box, logs (default: build/e2e)",
            "keep": "keep the work folder (squid logs, guest overlay, serial console, ssh config) for debugging",
            "dry_run": DRY_HELP})
@cli.user_errors
def e2e(c, out="build/e2e", keep=False, dry_run=False):
    """CI end-to-end bake: real Packer + provisioning in a QEMU guest behind squid, box spec, idempotence."""
    from tests.e2e.harness import run_e2e

    result = run_e2e(Path(out), keep=keep, dry_run=dry_run)
    if not dry_run:
        for line in result.summary():
            ui.say(line)
