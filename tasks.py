"""k4w tasks. Each one parses arguments and calls the k4w package; no logic lives here.

Run `invoke --list` for the tasks and `invoke --help TASK` for a task's options.
"""

from invoke import task
from invoke.exceptions import Exit

from k4w import cli, doctor as doctor_mod, plan as plan_mod, ui

CONFIG_HELP = "cluster definition to use (default: cluster.yml)"
OUT_HELP = "folder for rendered artifacts, boxes, logs and state (default: build)"
DRY_HELP = "print the exact commands this would run, change nothing"


@task(help={"config": CONFIG_HELP, "out": OUT_HELP, "dry_run": DRY_HELP})
@cli.user_errors
def render(c, config=cli.DEFAULT_CONFIG, out=cli.DEFAULT_OUT, dry_run=False):
    """Render every artifact (Packer, answer files, manifests, cluster.json) from the config."""
    if dry_run:
        cfg = cli.load(config)
        ui.say(f"would render {config} into {out} (config is valid: {len(cfg.nodes)} nodes, boxes {', '.join(cfg.boxes())})")
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
    from pathlib import Path

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
    c.run(f"invoke build --config {config} --out {out}" + (" --dry-run" if dry_run else ""), pty=False)
