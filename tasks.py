"""k4w tasks: entry points only. Each resolves its settings, loads the cluster once and calls the package.

Run `invoke --list` for the tasks and `invoke --help TASK` for a task's options.
--config, --out and --dry-run default to Invoke configuration under "k4w" (see k4w.defaults):
an invoke.yaml beside this file or INVOKE_K4W_OUT=/data/build changes them for every task.
`invoke --dry TASK` is the same as `invoke TASK --dry-run`.
"""

# First: Ctrl-C or SIGTERM from here on ends in one line and exit code 130 or 143, never a
# traceback from an import (k4w.infra.signals; `python -m k4w` installs it before Invoke's own import).
from k4w.infra import signals

signals.install()

# Only what defining the tasks needs: each task imports its stages in its body, so `invoke --list`
# and Invoke's parsing do not wait for the whole package (tests/cli/test_startup.py holds this).
import functools  # noqa: E402
from pathlib import Path  # noqa: E402

from invoke import Collection, task  # noqa: E402
from invoke.exceptions import Exit  # noqa: E402

from k4w.defaults import DEFAULTS  # noqa: E402


def user_errors(fn):
    """k4w.commands.cli.user_errors, with k4w.commands.cli imported when the task runs, not when tasks.py loads."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from k4w.commands import cli

        return cli.user_errors(fn)(*args, **kwargs)

    return wrapper


CONFIG_HELP = "cluster definition to use (default: cluster.yml)"
OUT_HELP = "folder for rendered artifacts, boxes, logs and state (default: build)"
DRY_HELP = "print the exact commands this would run, change nothing"
COMMON_HELP = {"config": CONFIG_HELP, "out": OUT_HELP, "dry_run": DRY_HELP}
BUILD_HELP = {
    **COMMON_HELP,
    "force": "rebuild even when the box is up to date",
    "iso": "use this ISO file instead of iso/<iso.name from the box profile>; its sha256 must still match",
}


@task(help=COMMON_HELP)
@user_errors
def render(c, config=None, out=None, dry_run=False):
    """Render every artifact (Packer, answer files, manifests, cluster.json) from the config."""
    from k4w.commands import cli

    s = cli.settings(c, config, out, dry_run)
    cli.rendered(cli.load(s), s)


@task(help=COMMON_HELP)
@user_errors
def validate(c, config=None, out=None, dry_run=False):
    """Render, then check each artifact with the real tool that consumes it."""
    from k4w.commands import cli

    s = cli.settings(c, config, out, dry_run)
    cluster = cli.load(s)
    cli.validate(cluster, s, cli.rendered(cluster, s))


@task(help=COMMON_HELP)
@user_errors
def plan(c, config=None, out=None, dry_run=False):
    """Render and show what build and cluster-up would do: nodes, derived values, commands."""
    from k4w.commands import cli, plan as plan_mod

    s = cli.settings(c, config, out, dry_run)
    cluster = cli.load(s)
    plan_mod.show(cluster, s.out, cli.rendered(cluster, s), dry_run=s.dry_run)


@task(help={**COMMON_HELP, "stage": "validate, build or cluster: which checks must pass (default build)",
            "online": "also ask every ISO and download URL of the boxes whether it still answers (HEAD through the proxy)",
            "offline": "this host cannot download (air-gapped): every component, and every image a bake imports, must "
                       "already be in the caches (invoke bundle-import)"})
@user_errors
def doctor(c, config=None, out=None, stage="build", dry_run=False, online=False, offline=False):
    """Check this host before a long step: Hyper-V, rights, tools, switches, ISOs, disk, proxy."""
    from k4w.commands import cli, doctor as doctor_mod
    from k4w.infra import ui

    if stage not in doctor_mod.STAGES:
        raise Exit(f"--stage must be one of {', '.join(doctor_mod.STAGES)}", code=2)
    s = cli.settings(c, config, out, dry_run, uses_out=False)  # reads only: works while a build holds --out
    if online and offline:
        raise Exit("--online asks the download URLs; --offline says this host cannot: choose one", code=2)
    failed = doctor_mod.show(doctor_mod.run(cli.load(s), s.out, online=online, offline=offline), stage)
    if failed:
        raise Exit(f"{failed} check(s) required for '{stage}' failed", code=1)
    ui.say(f"ready for {stage}")


@task(name="all", help=COMMON_HELP)
@user_errors
def all_(c, config=None, out=None, dry_run=False):
    """The main job: render + validate + plan; on a Hyper-V host, then build both boxes."""
    from k4w.commands import cli, plan as plan_mod

    s = cli.settings(c, config, out, dry_run)
    cluster = cli.load(s)
    files = cli.rendered(cluster, s)
    cli.validate(cluster, s, files)
    plan_mod.show(cluster, s.out, files, dry_run=s.dry_run)
    cli.build_on_hyperv(cluster, s)


@task(name="network-up", help={"config": CONFIG_HELP, "dry_run": "print the PowerShell (Hyper-V) or the XML and virsh commands (libvirt), change nothing"})
@user_errors
def network_up(c, config=None, dry_run=False):
    """Hyper-V: the cluster switch, host gateway address and NetNat (as Administrator). libvirt: the management and
    cluster networks. Idempotent."""
    from k4w.commands import cli
    from k4w import cluster

    s = cli.settings(c, config, dry_run=dry_run, uses_out=False)
    cfg = cli.load(s).config
    if cfg.host.provider == "libvirt":
        from k4w.cluster import libvirt_network

        libvirt_network.network_up(cfg, dry_run=s.dry_run)
    else:
        cluster.network_up(cfg, dry_run=s.dry_run)


@task(name="cluster-up", help=COMMON_HELP)
@user_errors
def cluster_up(c, config=None, out=None, dry_run=False):
    """Bring up the hybrid cluster: VMs, kubeadm, Flannel, joins, demo; resumes after a failure."""
    from k4w.commands import cli

    s = cli.settings(c, config, out, dry_run)
    cluster = cli.load(s)
    cli.cluster_up(cluster, s, cli.rendered(cluster, s))


@task(name="cluster-down", help=COMMON_HELP)
@user_errors
def cluster_down(c, config=None, out=None, dry_run=False):
    """Destroy the cluster's VMs and forget its state."""
    from k4w.commands import cli
    from k4w import cluster

    s = cli.settings(c, config, out, dry_run)
    cluster.cluster_down(cli.load(s), s.out, dry_run=s.dry_run)


@task(name="cluster-reset", help=COMMON_HELP)
@user_errors
def cluster_reset(c, config=None, out=None, dry_run=False):
    """Undo kubeadm on every node and stop the Windows services, keeping the VMs and their IPs."""
    from k4w.commands import cli
    from k4w import cluster

    s = cli.settings(c, config, out, dry_run)
    cluster.cluster_reset(cli.load(s), s.out, dry_run=s.dry_run)


@task(help=COMMON_HELP)
@user_errors
def inventory(c, config=None, out=None, dry_run=False):
    """Write OUT/inventory/hosts.yaml: the Linux nodes as a kubespray inventory (groups, addresses, SSH user and key)."""
    from k4w.commands import cli, inventory as inventory_mod

    s = cli.settings(c, config, out, dry_run)
    inventory_mod.write(cli.load(s), s.out, dry_run=s.dry_run)


# No short flags: -c means --config everywhere else, and --check is not that.
@task(auto_shortflags=False,
      help={"check": "write nothing; fail (exit 1) when the committed files differ from what the config model gives",
            "dry_run": "say which files would be written, write nothing"})
@user_errors
def schema(c, check=False, dry_run=False):
    """Write docs/reference/cluster.schema.json and cluster-yml.md (the cluster.yml reference) from the config model."""
    from k4w.infra import sources
    from k4w.commands import schema as schema_mod

    if check:
        schema_mod.check(sources.REPO.root)
    else:
        schema_mod.write(sources.REPO.root, dry_run=bool(dry_run or c.config.k4w.dry_run or c.config.run.dry))


def _build(c, config, out, dry_run, **options):
    from k4w.commands import cli
    from k4w.infra import ui
    from k4w.bake import commands

    s = cli.settings(c, config, out, dry_run)
    commands.build(cli.load(s), s.out, dry_run=s.dry_run, console=ui.console, **options)


@task(name="build-windows", help=BUILD_HELP)
@user_errors
def build_windows(c, config=None, out=None, iso=None, force=False, dry_run=False):
    """Build the Windows Server box with Packer (skipped when up to date); log in OUT/logs/<box>.log."""
    _build(c, config, out, dry_run, node_os="windows", iso=iso, force=force)


@task(name="build-ubuntu", help=BUILD_HELP)
@user_errors
def build_ubuntu(c, config=None, out=None, iso=None, force=False, dry_run=False):
    """Build the Ubuntu box with Packer (skipped when up to date); log in OUT/logs/<box>.log."""
    _build(c, config, out, dry_run, node_os="linux", iso=iso, force=force)


@task(help={k: v for k, v in BUILD_HELP.items() if k != "iso"})
@user_errors
def build(c, config=None, out=None, force=False, dry_run=False):
    """Build every box the config uses, in parallel; a summary table names each log."""
    _build(c, config, out, dry_run, force=force)


@task(name="iso-add", help={"path": "the ISO file you have",
                            "box": "box profile it is for (default: the profile whose iso.name equals the file name)"})
@user_errors
def iso_add(c, path, box=None):
    """Record an ISO's sha256 in iso/catalogue.yml and hard-link it into iso/ (no silent copy across drives)."""
    from k4w.infra import ui
    from k4w.bake import commands

    commands.add_iso(path, box, console=ui.console)


@task(help={"box": "only this box of the config (default: every box a node uses)", "config": CONFIG_HELP,
            "cache": "cache folder (default: $K4W_CACHE, else downloads.cache in the config, else the user cache folder)",
            "images": "pull the container images the boxes need (for each box's platform, through cluster.yml's "
                      "registry mirrors) into the image cache, instead of the components",
            "dry_run": "say what would be downloaded, from where, into which file; download and write nothing"})
@user_errors
def fetch(c, box=None, config=None, cache=None, images=False, dry_run=False):
    """Download and verify every component (--images: container image) the boxes need into the host's cache, once."""
    from k4w.commands import cli
    from k4w.infra import ui
    from k4w.bake import commands

    s = cli.settings(c, config, None, dry_run, uses_out=False)  # the cache is not under --out
    commands.fetch_components(cli.load(s), box, cache_option=cache, dry_run=s.dry_run, console=ui.console, images=images)


# No short flags: -c and -o mean --config and --out everywhere else, and BOX COMPONENT are positional.
@task(auto_shortflags=False,
      help={"box": "box profile, e.g. windows-1803", "component": "component of that profile, e.g. flannel",
            "config": CONFIG_HELP, "replace": "record a new sha256 even though a different one is pinned",
            "dry_run": DRY_HELP})
@user_errors
def pin(c, box, component, config=None, replace=False, dry_run=False):
    """Download a component whose publisher prints no checksum, show its sha256, record it in k4w-pins.yml."""
    from k4w.commands import cli
    from k4w.infra import ui
    from k4w.bake import commands

    s = cli.settings(c, config, None, dry_run, uses_out=False)
    commands.pin_component(s.config, box, component, replace=replace, dry_run=s.dry_run, console=ui.console)


@task(name="pin-images", auto_shortflags=False,
      help={"box": "only this box of the config (default: every box a node uses)", "config": CONFIG_HELP,
            "replace": "record a new digest even though a different one is pinned (the tag moved)",
            "dry_run": "say which images would be resolved, and from where; pull and write nothing"})
@user_errors
def pin_images(c, box=None, config=None, replace=False, dry_run=False):
    """Resolve every container image the boxes need (each tag, for each box's platform) into the image cache and record its digest in k4w-pins.yml."""
    from k4w.commands import cli
    from k4w.infra import ui
    from k4w.bake import commands

    s = cli.settings(c, config, None, dry_run, uses_out=False)
    commands.pin_images(cli.load(s), box, replace=replace, dry_run=s.dry_run, console=ui.console)


@task(auto_shortflags=False,
      help={"file": "the archive to write (default: k4w-bundle-<config name>-<date>.tar in the current folder)",
            "box": "only this box of the config (default: every box a node uses)", "config": CONFIG_HELP,
            "dry_run": "say what the bundle would hold; fetch and write nothing"})
@user_errors
def bundle(c, file=None, box=None, config=None, dry_run=False):
    """On a connected host: one archive with every component and image the boxes need, and the pins, for an air-gapped host."""
    from k4w.commands import cli
    from k4w.infra import ui
    from k4w.bake import commands

    s = cli.settings(c, config, None, dry_run, uses_out=False)
    commands.make_bundle(cli.load(s), file, box, dry_run=s.dry_run, console=ui.console)


@task(name="bundle-import", auto_shortflags=False,
      help={"file": "the archive `invoke bundle` wrote", "config": CONFIG_HELP,
            "dry_run": "say what would be imported from where; write nothing"})
@user_errors
def bundle_import(c, file, config=None, dry_run=False):
    """On an air-gapped host: fill the component and image caches from a bundle, every file checked; adds its image pins."""
    from k4w.commands import cli
    from k4w.infra import ui
    from k4w.bake import commands

    s = cli.settings(c, config, None, dry_run, uses_out=False)
    commands.import_bundle(s.config, file, dry_run=s.dry_run, console=ui.console)


@task(name="cache-prune", auto_shortflags=False, iterable=["also"],
      help={"config": CONFIG_HELP, "cache": "the cache folder (default: as invoke fetch resolves it)",
            "also": "another cluster.yml that uses this cache: what it needs is kept too (repeatable)",
            "dry_run": "list what would be removed and its size; remove nothing"})
@user_errors
def cache_prune(c, config=None, cache=None, also=None, dry_run=False):
    """Remove from the host caches the components and images that no box of the config(s) needs any more."""
    from k4w.commands import cli
    from k4w.infra import ui
    from k4w.bake import commands

    s = cli.settings(c, config, None, dry_run, uses_out=False)  # the cache is not under --out
    commands.prune_caches(cli.load(s), also, cache_option=cache, dry_run=s.dry_run, console=ui.console)


@task(name="test-box", help={"box": "box profile to test, e.g. ubuntu-1604 or windows-1803", **COMMON_HELP})
@user_errors
def test_box(c, box, config=None, out=None, dry_run=False):
    """Boot a throwaway VM from OUT/boxes/<box>.json, run its testinfra spec, destroy it, record the result."""
    from k4w.commands import cli
    from k4w.verify import flows

    s = cli.settings(c, config, out, dry_run)
    flows.test_box(cli.load(s), box, s.out, dry_run=s.dry_run)


@task(name="cluster-test", help=COMMON_HELP)
@user_errors
def cluster_test(c, config=None, out=None, dry_run=False):
    """Node specs on every node, then nodes, system pods and the connectivity matrix; reports in OUT/reports/."""
    from k4w.commands import cli
    from k4w.verify import flows

    s = cli.settings(c, config, out, dry_run)
    flows.cluster_test(cli.load(s), s.out, dry_run=s.dry_run)


@task(help={"box": "the CI box to bake: debian-12-e2e (Docker era, default), ubuntu-2404-e2e or ubuntu-2604-e2e "
                   "(containerd era; ubuntu-2604-e2e is not in the default test suite)",
            "out": "e2e folder: rendered files, box, logs (default: build/e2e; build/e2e-ubuntu-2404 for ubuntu-2404-e2e, "
                   "build/e2e-ubuntu-2604 for ubuntu-2604-e2e)",
            "keep": "keep the work folder (squid logs, guest overlay, serial console, ssh config) for debugging",
            "cluster": "then a real single-node kubeadm cluster on a fresh guest of the box (containerd-era boxes "
                       "only; needs scripts/build-tools --group cluster; under TCG about 30 minutes with "
                       "ubuntu-2404-e2e, about 45 with ubuntu-2604-e2e; not run by CI)",
            "provider": "qemu (default: the harness boots the guests) or libvirt: with --cluster and --box "
                        "ubuntu-2604-e2e, k4w's own network-up, cluster-up, cluster-test, cluster-reset, "
                        "cluster-down and an existing-cluster join on two libvirt VMs (docs/linux-host.md; "
                        "needs libvirtd and vagrant-libvirt; hours under TCG; not run by CI)",
            "offline": "containerd-era boxes: bake with downloads.images: cache, the box's images built here and "
                       "served by registries on 127.0.0.1 the guest cannot reach; the guest imports them from the "
                       "host's image cache, and the registries' logs must show 0 requests during the bake "
                       "(needs the cluster group of scripts/build-tools; not run by CI)",
            "dry_run": DRY_HELP})
@user_errors
def e2e(c, box="debian-12-e2e", out=None, keep=False, dry_run=False, cluster=False, provider="qemu", offline=False):
    """CI end-to-end bake: real Packer + provisioning in a QEMU guest behind squid, box spec, idempotence."""
    from k4w.commands import cli
    from k4w.infra import ui
    from k4w.infra.errors import K4wError
    from ci.e2e import BOXES, default_out, run_e2e

    if box not in BOXES:
        raise K4wError(f"--box {box}: no such CI box; choose one of: {', '.join(BOXES)}")
    # Every box's run keeps its base images under build/e2e/base-image, one cache link per recipe (base_image.RECIPES).
    images = default_out(Path("build"), BOXES[0]) / "base-image"
    s = cli.settings(c, out=out or str(default_out(Path("build"), box)), dry_run=dry_run)
    result = run_e2e(s.out, box=box, keep=keep, dry_run=s.dry_run, base_images=None if out else images, cluster=cluster,
                     provider=provider, offline=offline)
    if not s.dry_run:
        for line in result.summary():
            ui.say(line)


ns = Collection(render, validate, plan, doctor, all_, network_up, cluster_up, cluster_down, cluster_reset,
                build_windows, build_ubuntu, build, iso_add, fetch, pin, pin_images, bundle, bundle_import, cache_prune, test_box, cluster_test, e2e, inventory, schema)
ns.configure({"k4w": DEFAULTS})
