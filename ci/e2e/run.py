"""`invoke e2e`: the Linux half of the pipeline, for real, in QEMU, behind a real proxy.

Phases (each with a budget; the timings end up in a table):
  tools         every program the run needs, or a failure naming its install command
  base image    debootstrapped Debian 12 disk + kernel (cached by recipe: "reused" or "built")
  proxy         a private squid on 127.0.0.1:<free port> that demands basic-auth credentials
  mirror        a downloads.mirror on 127.0.0.1 serving what CI cannot download (mirror.py): for the
                containerd era the REAL binaries from the pinned tool cache (release_files.py), their
                digests handed to the build as the run's k4w-pins.yml; for the seed era CI STAND-INS
                of the Kubernetes node tarball and the CNI plugins (seed_stand_ins.py)
  render        a cluster.yml with proxy.http/https and downloads -> k4w.model.config.load -> k4w.render.render
  fetch         k4w.bake.fetch, as `invoke fetch`: the box's downloads into the run's component cache
  bundle        (--offline) `invoke bundle` of the box, then `invoke bundle-import` on an "air-gapped host": a
                second cluster.yml whose caches and k4w-pins.yml are empty; the bake below uses that one
  packer build  k4w.bake.build_box: the real `packer init` and `packer build` of packer/<box>.pkr.hcl;
                every step runs, and the steps install those files from Packer's HTTP server

One run bakes one CI box (BOXES): debian-12-e2e runs the Docker era's steps (ubuntu-1604's list),
ubuntu-2404-e2e the containerd era's (ubuntu-2404's list), both on the same base image.
  proxy proof   the squid access log holds the build guest's apt requests, and no component download
  boot guest    a fresh guest from the produced .box (its box.img, same kernel/initrd)
  box spec      the Ubuntu box spec over SSH (k4w.verify.flows.test_ssh_target)
  second boot   a second guest from the same box: its SSH host keys differ from the first's
  secret scan   no file on the box's root filesystem, and no journal entry, holds the proxy password
  idempotence   the same provisioning again on that guest; nothing may change
  cleanup       guest and squid stopped, temp files removed, no process left behind

With --cluster (the containerd-era boxes: ubuntu-2404-e2e, ubuntu-2604-e2e), a fresh guest of the box then runs a real single-node kubeadm
cluster before cleanup: the `cluster ...` phases of cluster_run.py.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import secrets
import shlex
import shutil
import signal
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import yaml

from k4w.model import config, profiles
from k4w.infra import sources
from k4w.infra import packer_hcl, tools, ui
from k4w import render
from k4w.bake import build_box, catalogue, commands as bake_commands, fetch, image_cache
from k4w.derive import images as image_inventory, registry as k4w_registry
from k4w.infra import packer_cli
from k4w.model import pins
from k4w.derive.step_env import step_env
from k4w.derive.cluster import Cluster
from k4w.infra.errors import K4wError
from k4w.infra.redact import register_secret
from k4w.verify import flows
from tests.fakes import local_http
from . import base_image, cluster_file, cluster_images, cluster_run, guest as guest_mod, idempotence, libvirt_run, mirror as mirror_mod, procs, registry as registry_mod, report, rerun, seed_stand_ins, squid
from .phases import E2EError, Log, PhaseRecord, Phases

BOX = cluster_file.BOX
# Every CI box: the Docker era's (debian-12-e2e, the default) and the containerd era's, each running
# its production twin's guest steps: the first two on the Debian 12 stand-in image, ubuntu-2604-e2e on
# a debootstrapped Ubuntu 26.04 (the profile's ci_base_image names the base_image recipe).
BOXES = (BOX, "ubuntu-2404-e2e", "ubuntu-2604-e2e")
# The boxes the default test suite bakes (tests/e2e/test_e2e_bake.py): not ubuntu-2604-e2e, whose
# ~18 min bake does not fit CI's 90 minutes beside these two, and whose base image needs
# archive.ubuntu.com, which CI may not reach. `invoke e2e --box ubuntu-2604-e2e` runs it.
CI_BOXES = BOXES[:2]
# A bound that stops a hung run, not the expected time: on a quiet 2-core CI machine a bake takes
# 6-9 min (seed era ~505 s, containerd era ~335 s before real binaries); on a machine shared with Go
# builds (load 10-16) a whole run measured 1158-1691 s, which the old 28 min bound cut short in its
# last phase. Two runs at this bound still leave CI (90 min) time for the rest of the suite.
TOTAL_BUDGET_S = 40 * 60
# Per phase, in seconds. Measured on 2 cores with TCG: base image ~150-200 s when built,
# packer build ~8 min (docker.io alone ~5 min), boot ~35 s, spec ~1 min, re-run ~1 min.
BUDGETS = {
    "tools": 30,
    "base image": 900,
    "proxy": 60,
    # Packing ~230 MB of real binaries with gzip -6: ~40 s on a quiet core.
    "mirror": 240,
    "render": 60,
    # --offline: the box's images built from the pinned tools and pushed (~400 MB of archives), then pulled
    # into the image cache and pinned by k4w.
    "registries": 600,
    "pin images": 300,
    "fetch": 60,
    # --offline: write the bundle (~310 MB) and import it, every file hashed again: ~30 s.
    "bundle": 300,
    "packer build": 1200,
    "proxy proof": 30,
    "boot guest": 420,
    "box spec": 600,
    "second boot": 420,
    "secret scan": 300,
    "idempotence": 600,
    "cleanup": 120,
}
# Programs the run calls; k4w.infra.tools.INSTALL names how to install each. Vagrant is not run:
# its insecure key logs in to the box.
TOOLS = ("debootstrap", "mkfs.ext4", "chroot", "squid", "openssl", "packer", "qemu-system-x86_64", "qemu-img", "ssh",
         "tar", "vagrant")
SBIN = "/usr/local/sbin:/usr/sbin:/sbin"


class E2EFailed(E2EError):
    """The run failed; .result holds what was measured up to the failure (timings included)."""

    def __init__(self, message: str, result: "E2EResult"):
        self.result = result
        super().__init__(message)


@dataclass
class E2EResult:
    out: Path
    log: Path
    box: str = BOX
    phases: list[PhaseRecord] = field(default_factory=list)
    table: str = ""
    base_image: Path | None = None
    base_reused: bool | None = None
    box_file: Path | None = None
    catalogue: Path | None = None
    spec: dict | None = None
    proxy_build: dict | None = None
    proxy_rerun: dict | None = None
    secret_scan: dict | None = None
    host_keys: dict | None = None
    fetch: dict | None = None
    # Components the mirror served as CI stand-ins (the seed era's); [] when every file was real.
    stand_ins: list[str] | None = None
    steps: list[dict] = field(default_factory=list)
    rerun_steps: list[str] = field(default_factory=list)
    idempotence: list[str] = field(default_factory=list)
    leftovers: list[str] = field(default_factory=list)
    error: str | None = None
    dry_run: bool = False
    cluster: cluster_run.ClusterReport | None = None   # set when the run brings up the cluster (--cluster)
    # --provider libvirt --cluster: k4w's own commands on two libvirt VMs (libvirt_run.py).
    libvirt: libvirt_run.LibvirtReport | None = None
    # --offline: downloads.images cache; what the registries served, and when (registry_requests_during_bake).
    offline: dict | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and not self.leftovers

    def summary(self) -> list[str]:
        """Everything a reader of the CI output needs, in order."""
        lines = [f"box profile: {self.box}", "phase timings:", *("  " + row for row in self.table.splitlines())]
        if self.base_image:
            lines.append(f"base image: {self.base_image} ({'reused' if self.base_reused else 'built'})")
        if self.box_file:
            lines.append(f"box: {self.box_file}; catalogue: {self.catalogue}")
        if self.stand_ins is not None:
            lines.append("stand-ins: " + (", ".join(self.stand_ins) if self.stand_ins else "none (real binaries)"))
        if self.fetch:
            lines.append(f"fetch: {self.fetch['summary']} into {self.fetch['cache']}")
        if self.steps:
            lines.append("box steps: " + ", ".join(f"{s['step']} {s['status']}" for s in self.steps))
        if self.proxy_build:
            p = self.proxy_build
            lines.append(f"proxy: {p['lines']} access-log lines during the build, {p['apt_requests']} apt requests from the guest "
                         f"({p['indexes']} indexes, {p['debs']} .debs, {p['bytes']} bytes) via {', '.join(p['clients'])} to {', '.join(p['hosts'])}; "
                         f"{p['other_requests']} other requests ({p['other_bytes']} bytes), {p['component_requests']} for a box component")
            lines += [f"  e.g. {sample}" for sample in p.get("samples", [])]
        if self.spec:
            s = self.spec
            lines.append(f"box spec: {flows.specrun.outcome(s)}: {s['passed']} passed, {s['failed']} failed, {s['errors']} errors, "
                         f"{len(s['deselected'])} deselected")
            reasons: dict[tuple[str, str], int] = {}
            for d in s["deselected"]:
                reasons[(d["check"], d["reason"])] = reasons.get((d["check"], d["reason"]), 0) + 1
            lines += [f"  deselected {check} ({n}): {reason}" for (check, reason), n in sorted(reasons.items())]
        if self.secret_scan:
            scan = self.secret_scan
            lines.append(f"secret scan of the booted box: {scan['files']} files on its root filesystem, "
                         f"{len(scan['holding'])} hold the proxy password"
                         + (f" ({', '.join(scan['holding'])})" if scan["holding"] else "")
                         + f"; control: the box user found in {', '.join(scan['control']) or 'nothing'}")
            lines.append(f"secret scan of its journal (journalctl --merge, every field): {scan['journal_entries']} entries, "
                         f"{scan['journal_matches']} hold the proxy password; control: a logged marker found "
                         f"{scan['journal_control']} time(s)")
        if self.host_keys:
            keys = self.host_keys
            lines.append(f"SSH host keys of two VMs from the box: {len(keys['first'])} and {len(keys['second'])} keys, "
                         f"{len(keys['shared'])} shared")
        if self.rerun_steps:
            lines += ["second provisioning run:", *(f"  {step}" for step in self.rerun_steps)]
        if self.idempotence:
            lines += ["idempotence:", *(f"  {line}" for line in self.idempotence)]
        if self.cluster:
            c = self.cluster
            lines.append("cluster: " + ", ".join(f"{s['step']} {s['seconds']} s" for s in c.steps))
            lines += [f"  {check}: {what}" for check, what in c.checks.items()]
            lines.append(f"  stand-ins: {', '.join(c.stand_ins) or 'none'}; substitutes: "
                         + (", ".join(f"{name} <- {s['module']}@{s['version']}" for name, s in c.substitutes.items()) or "none"))
        if self.offline:
            o = self.offline
            made = f"CI stand-ins ({len(o['stand_ins'])}, ci/e2e/seed_stand_ins.py)" if o.get("stand_ins") else "built"
            lines.append(f"offline: {len(o.get('pushed', {}))} images, {made}, pushed to the run's registries; "
                         f"pin-images: {o.get('pin_summary', '?')}; "
                         f"registry requests during the bake: {o.get('registry_requests_during_bake', '?')}"
                         + (f"; staged {o['staged_archives']} archives, {o['staged_bytes']} bytes" if "staged_archives" in o else ""))
            if "bundle" in o:
                b = o["bundle"]
                lines.append(f"  bundle: {b['bytes']} bytes, {b['components']} components and {b['images']} images; "
                             f"bundle-import into an empty cache: {b['import_seconds']} s, {b['pins_added']} pins added; "
                             f"then {b['fetch']}")
            if o.get("substitutes"):
                lines.append("  substitutes: " + ", ".join(f"{name} <- {what.get('module', what)}" for name, what in o["substitutes"].items()))
        if self.libvirt:
            v = self.libvirt
            lines.append("libvirt: " + ", ".join(f"{p['command']} {p['seconds']} s" for p in v.phases))
            lines += [f"  {check}: {what}" for check, what in v.checks.items()]
            lines.append(f"  stand-ins: {', '.join(v.stand_ins) or 'none'}")
        if self.leftovers:
            lines += ["processes left behind:", *(f"  {p}" for p in self.leftovers)]
        lines.append(f"log: {self.log}")
        if self.error:
            lines.append(f"FAILED: {self.error}")
        return lines


# ------------------------------------------------------------------ the run


# The CI-only box profile lives beside this harness, never among the boxes a user may pick.
E2E_BOXES = Path(__file__).resolve().parent / "boxes"
# Where the run's guests live: QEMU processes of this harness, or libvirt domains made by k4w's own commands.
PROVIDERS = ("qemu", "libvirt")


def run_e2e(out: Path, keep: bool = False, dry_run: bool = False, say: Callable[[str], None] | None = None,
            box: str = BOX, base_images: Path | None = None, cluster: bool = False, provider: str = "qemu",
            offline: bool = False) -> E2EResult:
    """Run the end-to-end bake of one CI box (BOXES) into out (e.g. build/e2e). Raises E2EFailed
    (with .result) on failure.

    keep: leave the work folder (squid logs, guest overlay and serial log, ssh config) for
    debugging; processes are stopped regardless.
    base_images: where the base image cache lives when not in out/base-image, so the runs of
    several boxes share one debootstrapped image (out/base-image then links to it).
    cluster: then bring up a real single-node cluster on a fresh guest of the box (cluster_run).
    provider: qemu (the guests are QEMU processes of this harness) or libvirt: with cluster, k4w's own
    commands bring up a two-node cluster of the box in libvirt VMs (libvirt_run), after the bake.
    offline: the bake with downloads.images: cache: the box's images are built here (the Docker era's as
    CI stand-ins, seed_stand_ins.images), pushed to registries on 127.0.0.1 (cluster.yml's mirrors, which the
    guest cannot reach), pulled and pinned by `pin-images`, and imported by the guest (`ctr images import`,
    or `docker load` in the Docker era); the registries' logs count the bake's requests.
    """
    if offline and cluster:
        raise E2EError("--offline is the bake alone: run it without --cluster")
    if provider not in PROVIDERS:
        raise E2EError(f"--provider {provider}: choose one of {', '.join(PROVIDERS)}")
    if provider == "libvirt" and not cluster:
        raise E2EError("--provider libvirt runs k4w's cluster commands in libvirt VMs: add --cluster")
    if provider == "libvirt" and box != libvirt_run.BOX:
        raise E2EError(f"--provider libvirt runs on --box {libvirt_run.BOX} (its guest has netplan, which cluster-ip.sh "
                       f"configures), not {box}")
    if box not in BOXES:
        raise E2EError(f"no CI box named {box!r}; the e2e boxes are: {', '.join(BOXES)}")
    if cluster and box not in cluster_run.BOXES:
        raise E2EError(f"--cluster runs on the containerd era's boxes only: --box {' or '.join(cluster_run.BOXES)} (not {box})")
    with sources.using(dataclasses.replace(sources.REPO, box_folders=(E2E_BOXES, *sources.REPO.box_folders))):
        return _run_e2e(Path(out).resolve(), box, base_images, keep, dry_run, say, cluster, provider, offline)


def default_out(root: Path, box: str) -> Path:
    """ROOT/e2e for the default box (as before several boxes), ROOT/e2e-ubuntu-2404 for ubuntu-2404-e2e and
    ROOT/e2e-ubuntu-2604 for ubuntu-2604-e2e."""
    return Path(root) / ("e2e" if box == BOX else f"e2e-{box.removesuffix('-e2e')}")


def _run_e2e(out: Path, box: str, base_images: Path | None, keep: bool, dry_run: bool,
             say: Callable[[str], None] | None, cluster: bool = False, provider: str = "qemu",
             offline: bool = False) -> E2EResult:
    say = say or ui.say
    if dry_run:
        return _dry_run(out, box, base_images, say, cluster, offline)
    log = Log(out / "logs" / "e2e.log", say)
    on_libvirt = provider == "libvirt"
    extra = (libvirt_run.LIBVIRT_BUDGET_S if on_libvirt else cluster_run.CLUSTER_BUDGET_S) if cluster else 0
    extra += (BUDGETS["registries"] + BUDGETS["pin images"] + BUDGETS["bundle"]) if offline else 0
    phases = Phases(log.event, TOTAL_BUDGET_S + extra)
    result = E2EResult(out=out, log=log.path, box=box, offline={} if offline else None,
                       cluster=cluster_run.ClusterReport(box=box) if cluster and not on_libvirt else None,
                       libvirt=libvirt_run.LibvirtReport(box=box) if on_libvirt else None)
    workdir = Path(tempfile.mkdtemp(prefix="k4w-e2e-"))
    # squid drops to its own user, which must be able to reach its folder inside.
    os.chmod(workdir, 0o711)
    stack = contextlib.ExitStack()
    started: list[int] = []
    restore = _sigterm_raises()
    saved_path = os.environ.get("PATH", "")
    interrupted: BaseException | None = None
    try:
        _phases(phases, log, result, workdir, stack, started, keep, base_images)
    except Exception as exc:  # noqa: BLE001 - recorded, then raised as E2EFailed below
        result.error = str(exc) if isinstance(exc, K4wError) else f"{type(exc).__name__}: {exc}"
    except BaseException as exc:  # Ctrl-C, SIGTERM: clean up, then let it stop the caller too
        result.error = f"interrupted ({type(exc).__name__}: {exc})"
        interrupted = exc
    finally:
        try:
            with phases.phase("cleanup", BUDGETS["cleanup"], capped=False) as ph:
                stack.close()  # stops the guest, then squid (reverse order of start)
                markers = [str(workdir), str(out / "packer-vm")]
                result.leftovers = procs.leftovers(started, markers)
                _keep_proxy_logs(workdir, out)
                if not keep:
                    shutil.rmtree(workdir, ignore_errors=True)
                ph.note = "kept " + str(workdir) if keep else "no process left" if not result.leftovers else "LEFTOVERS"
        except BaseException as exc:  # noqa: BLE001
            result.error = result.error or f"cleanup: {exc}"
        restore()
        os.environ["PATH"] = saved_path
        result.phases = phases.records
        result.table = phases.table()
        for line in result.summary():
            log.write(line + "\n")
        try:
            report.write(out / report.NAME, result)
        except OSError as exc:
            log.write(f"could not write {out / report.NAME}: {exc}\n")
        log.close()
    if interrupted is not None:
        raise interrupted
    if not result.ok:
        # The whole summary: a failed CI job must show the timings and what was found so far.
        raise E2EFailed("e2e failed\n" + "\n".join(result.summary()), result)
    return result


def _phases(phases: Phases, log: Log, result: E2EResult, workdir: Path, stack: contextlib.ExitStack,
            started: list[int], keep: bool, base_images: Path | None) -> None:
    out, box = result.out, result.box
    profile = profiles.load(box)
    build_cfg = profile.data.build

    with phases.phase("tools", BUDGETS["tools"]):
        _require_tools()
        if result.cluster is not None or result.libvirt is not None or result.offline is not None:
            cluster_images.require_host_programs()
        if result.libvirt is not None:
            libvirt_run.require_host()

    with phases.phase("base image", BUDGETS["base image"]) as ph:
        image = base_image.ensure(_base_image_folder(out, base_images), ph, log, recipe_of(profile))
        result.base_image, result.base_reused = image.folder, image.reused
        ph.note = f"{'reused' if image.reused else 'built'} {image.key}"

    with phases.phase("proxy", BUDGETS["proxy"]) as ph:
        # A proxy that demands credentials, as corporate ones do: the bake must get through it,
        # and afterwards no file in the box may hold the password (the "secret scan" phase).
        credentials = squid.Credentials.fresh()
        register_secret(credentials.password)
        proxy = stack.enter_context(squid.running(workdir / "squid", ph, log, credentials))
        started.append(proxy.proc.pid)
        ph.note = f"squid on 127.0.0.1:{proxy.port}, basic auth as {credentials.user}"

    with phases.phase("mirror", BUDGETS["mirror"]) as ph:
        served = mirror_mod.for_profile(profile, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                                        + " by ci/e2e/release_files.py from the pinned tool cache")
        mirror = stack.enter_context(local_http.site(served.paths))
        result.stand_ins = served.stand_ins
        ph.note = served.note(mirror.url)

    registries = None
    if result.offline is not None:
        with phases.phase("registries", BUDGETS["registries"]) as ph:
            # Every image the box needs, as k4w lists it, built from the pinned tools (no registry is reachable
            # here) and pushed where cluster.yml's mirrors are: on 127.0.0.1, which the guest cannot reach.
            names = image_inventory.box_images(profile)
            if profile.container_runtime == "docker":
                # Kubernetes 1.11's images: CI stand-ins (seed_stand_ins.images), named in the report.
                built = seed_stand_ins.images(names, out / "cluster-images")
                result.offline["stand_ins"] = names
            else:
                result.offline["substitutes"] = cluster_images.check_names(names)
                built = cluster_images.build(names, out / "cluster-images")
            domains = [k4w_registry.image_domain(n)[0] for n in names]
            # Docker mirrors docker.io only through daemon.json, with no CA (config_rules): a Docker box gets a
            # registry for each of its images' upstreams and none for docker.io.
            upstreams = tuple(dict.fromkeys(domains if profile.container_runtime == "docker" else [*registry_mod.UPSTREAMS, *domains]))
            registries = stack.enter_context(registry_mod.serving("127.0.0.1", workdir / "registries", upstreams=upstreams))
            started.extend(registries.pids())
            result.offline["pushed"] = registries.push_archives(built)
            log.write("".join(f"pushed {name} {digest}\n" for name, digest in result.offline["pushed"].items()))
            ph.note = f"{len(built)} images, {sum(b.bytes for b in built)} bytes of archives, pushed to {len(registries.registries)} registries"

    with phases.phase("render", BUDGETS["render"]) as ph:
        cluster_yml = workdir / "cluster.yml"
        # The cache lives beside the base image: a second run on this host starts from a warm cache.
        cache_dir = out / "component-cache"
        cluster_yml.write_text(cluster_file.text(proxy.url_for_guests, mirror.url, str(cache_dir), box,
                                                 emulated_cpu=result.cluster is not None,
                                                 registry=registries.registry_block() if registries else None),
                               encoding="utf-8")
        log.write(f"# {cluster_yml}:\n{cluster_yml.read_text()}")
        if served.pins:
            pins_file = write_pins(cluster_yml, served.pins)
            log.write(f"# {pins_file}:\n{pins_file.read_text()}")
        cfg = config.load(cluster_yml)
        cluster = Cluster.resolve(cfg, cluster_yml)  # with the k4w-pins.yml beside it
        files = render.render(cluster, out)
        # root: the folder Packer reads the template in (path.root), so the scripts the re-run below
        # uploads are the shipped copies beside it, as Packer's build reads them.
        template = packer_hcl.parse(files[f"packer/{box}.pkr.hcl"], root=out / "packer")
        # The re-run passes the variables' values as Packer's build does: from the secrets' environment.
        template["variables"] = packer_cli.variable_values(
            template, step_env(cluster.profile(box), cluster).secret_environment)
        ph.note = f"{len(files)} artifacts"

    if registries is not None:
        with phases.phase("pin images", BUDGETS["pin images"]) as ph:
            # As a user of downloads.images: cache does it once: the host pulls every image through the mirrors
            # into its image cache and pins the digests beside cluster.yml.
            counted = registries.request_counts()
            # A warm image cache from an earlier run must not stand in for this run's images (rebuilt, new digests).
            shutil.rmtree(image_cache.cache_root(cluster), ignore_errors=True)
            pinned = bake_commands.pin_images(cluster, box)
            result.offline["pin_summary"] = f"{len(pinned.recorded)} recorded, {pinned.unchanged} unchanged"
            result.offline["pin_requests"] = registries.request_count(since=counted)
            result.offline["pinned"] = pins.image_digests(pins.load(cluster_yml), str(profile.image_platform))
            # A Docker box names kubeadm's images under their mirror (k4w.derive.registry.apply): the same
            # images, in the same order, as the names they were pushed under.
            as_pulled = dict(zip(image_inventory.box_images(cluster.profile(box)), names))
            pushed = {name: result.offline["pushed"].get(upstream) for name, upstream in as_pulled.items()}
            wrong = {n: d for n, d in result.offline["pinned"].items() if pushed.get(n) != d}
            if wrong or set(result.offline["pinned"]) != set(pushed):
                raise E2EError(f"pin-images recorded {result.offline['pinned']}, not what the registries hold: {result.offline['pushed']}")
            # Render again: the guest step gets the pinned digests (K4W_IMAGE_IMPORTS).
            cluster = Cluster.resolve(config.load(cluster_yml), cluster_yml)
            files = render.render(cluster, out)
            template = packer_hcl.parse(files[f"packer/{box}.pkr.hcl"], root=out / "packer")
            steps = step_env(cluster.profile(box), cluster)
            template["variables"] = packer_cli.variable_values(template, steps.secret_environment)
            result.offline["imports"] = steps.env["K4W_IMAGE_IMPORTS"].split()
            ph.note = f"{result.offline['pin_summary']}, {result.offline['pin_requests']} registry requests"

    with phases.phase("fetch", BUDGETS["fetch"]) as ph:
        fetched = fetch.fetch(cluster, [box])
        fetch.show(fetched)
        if fetched.failed:
            raise E2EError(fetch.failure_message(fetched))
        result.fetch = {"cache": str(fetched.root), "summary": fetched.summary(), "bytes": fetched.fetched,
                        "downloaded": fetched.count("downloaded"), "cached": fetched.count("cached"),
                        "files": sorted(r.item.relpath for r in fetched.rows)}
        ph.note = fetched.summary()

    if registries is not None:
        with phases.phase("bundle", BUDGETS["bundle"]) as ph:
            cluster = _air_gap(cluster, box, workdir / "air-gapped", registries, result.offline,
                               lambda cache_dir: cluster_file.text(proxy.url_for_guests, mirror.url, cache_dir, box,
                                                                  registry=registries.registry_block()))
            b = result.offline["bundle"]
            ph.note = (f"{b['bytes']} bytes ({b['components']} components, {b['images']} images); imported into an "
                       f"empty cache in {b['import_seconds']} s; then {b['fetch']}, {b['requests']} registry requests")

    with phases.phase("packer build", BUDGETS["packer build"]) as ph:
        offset = proxy.offset()
        before_bake = registries.request_counts() if registries else None
        box_log = out / "logs" / f"{box}.log"
        try:
            with procs.watchdog(ph, log, protect=set(started)):
                # The runner verifies the base disk like an ISO, against the sha256 taken when it was made.
                built = build_box(cluster, box, out, iso=image.disk, iso_sha256=image.sha256, force=True)
        finally:
            if box_log.is_file():
                result.steps = report.box_steps(profile.data.provision, box_log.read_text(encoding="utf-8", errors="replace"))
        build_log = proxy.text_since(offset)
        if registries is not None:
            # The registries' own access logs: what the build (host fetch, staging, the guest) asked of them.
            result.offline["registry_requests_during_bake"] = registries.request_count(since=before_bake)
            staged = sorted((out / "http" / box / "components").glob("image-*.tar"))
            result.offline["staged_archives"] = len(staged)
            result.offline["staged_bytes"] = sum(p.stat().st_size for p in staged)
            if result.offline["registry_requests_during_bake"]:
                raise E2EError(f"the bake asked the registries {result.offline['registry_requests_during_bake']} time(s); "
                               "with downloads.images: cache it must ask none (their access logs are in the work folder)")
        result.box_file, result.catalogue = _check_box(out, box, built.box_files)
        not_ran = [s for s in result.steps if s["status"] != "ran"]
        if not_ran:
            raise E2EError("every box step must run in CI: " + "; ".join(f"{s['step']} {s['status']} ({s['reason']})" for s in not_ran))
        ph.note = f"{built.status}: {result.box_file.name}, {len(result.steps)} steps ran"

    with phases.phase("proxy proof", BUDGETS["proxy proof"]) as ph:
        result.proxy_build = _proxy_proof(build_log, [Path(f).name for f in result.fetch["files"]])
        ph.note = (f"{result.proxy_build['apt_requests']} apt requests, "
                   f"{result.proxy_build['component_requests']} component downloads through the proxy")

    if result.libvirt is not None:
        # The box's own checks (spec, second boot, secret scan, idempotence) are the QEMU run's; this run is
        # about k4w's cluster commands on libvirt, and every minute of emulated CPU goes to them.
        proxy_stop = stack.pop_all()   # squid and the downloads mirror: the cluster needs neither
        proxy_stop.close()
        libvirt_run.run(result.libvirt, phases, log, out, out / "boxes", E2E_BOXES, workdir,
                        libvirt_run.registries_for(workdir, out), stack, keep=keep)
        return

    with phases.phase("boot guest", BUDGETS["boot guest"]) as ph:
        disk = guest_mod.extract_box_image(result.box_file, workdir / "box", ph, log)
        # A stack of its own, so the cluster phases can stop this guest first: two TCG guests on two
        # shared cores slowed the cluster's kubeadm init (the bake guest idled at a quarter of a core).
        bake_guest = stack.enter_context(contextlib.ExitStack())
        guest = bake_guest.enter_context(guest_mod.booted(
            disk, image.kernel, image.initrd, build_cfg.qemu.append, workdir / "guest", ph, log,
            memory_mb=int(build_cfg.memory_mb), cpus=int(build_cfg.cpus), keep=keep))
        started.append(guest.proc.pid)

    with phases.phase("box spec", BUDGETS["box spec"]) as ph:
        # No stale result from an earlier run may stand in for this one.
        (out / "reports" / f"test-box-{box}.json").unlink(missing_ok=True)
        with procs.watchdog(ph, log, protect=set(started)):
            try:
                result.spec = flows.test_ssh_target(cfg, box, guest.ssh.host, guest.ssh.port, guest.ssh.user,
                                                    guest.ssh.key, out, stage="box", config_file=cluster_yml)
            finally:
                result.spec = result.spec or _spec_result(out, box)
        ph.note = f"{result.spec['passed']} passed, {len(result.spec['deselected'])} deselected"

    with phases.phase("second boot", BUDGETS["second boot"]) as ph:
        # Every VM made from the box has its own SSH host keys (07-cleanup.sh ships none).
        with guest_mod.booted(disk, image.kernel, image.initrd, build_cfg.qemu.append, workdir / "guest-2", ph, log,
                              memory_mb=int(build_cfg.memory_mb), cpus=int(build_cfg.cpus), keep=keep) as second:
            started.append(second.proc.pid)
            result.host_keys = _compare_host_keys(guest, second, ph)
        ph.note = f"{len(result.host_keys['first'])} host keys each, none shared"

    with phases.phase("secret scan", BUDGETS["secret scan"]) as ph:
        result.secret_scan = _secret_scan(guest, credentials, ph)
        ph.note = (f"{result.secret_scan['files']} files, {len(result.secret_scan['holding'])} hold the proxy password; "
                   f"{result.secret_scan['journal_entries']} journal entries, {result.secret_scan['journal_matches']} do")

    with phases.phase("idempotence", BUDGETS["idempotence"]) as ph:
        ph.note = _idempotence(template, guest, proxy, ph, result)

    if result.cluster is not None:
        bake_guest.close()
        # The cluster runs the box's own binaries: whatever of them the bake had as stand-ins, it has too.
        result.cluster.stand_ins = list(result.stand_ins or [])
        cluster_run.run(result.cluster, phases, log, cluster, out, result.box_file, image, build_cfg, workdir, stack, started, keep,
                        netplan=recipe_of(profile).netplan)


# ------------------------------------------------------------------ phase details


def write_pins(cluster_yml: Path, document: dict) -> Path:
    """The run's k4w-pins.yml, where a user's `invoke pin` puts it: beside cluster.yml, so
    Cluster.resolve fills the digests into the profile (k4w.model.pins.apply) for the fetch, the
    build's refusal and the guest's own check."""
    path = pins.pins_path(cluster_yml)
    path.write_text(pins.HEADER + yaml.safe_dump(document, sort_keys=True), encoding="utf-8")
    return path


def _require_tools() -> None:
    missing = []
    for tool in TOOLS:
        # tools.find: packer is the pinned cache's (Packer 1.9.4 and its plugins) when built.
        if not (tools.find(tool) or shutil.which(tool, path=SBIN)):
            missing.append(str(tools.missing(tool)))
    if missing:
        raise E2EError("\n".join(missing))
    # debootstrap, chroot and mkfs live in sbin folders that a non-login root PATH may lack
    # (run_e2e restores PATH when it returns).
    path = os.environ.get("PATH", "")
    for folder in SBIN.split(":"):
        if folder not in path.split(":"):
            path += ":" + folder
    os.environ["PATH"] = path


def recipe_of(profile) -> base_image.Recipe:
    """The base image recipe the CI box profile names (ci_base_image)."""
    name = profile.data.get("ci_base_image")
    if not name:
        raise E2EError(f"{profile.path.name}: ci_base_image must name a base image recipe ({', '.join(base_image.RECIPES)})")
    return base_image.recipe_named(name)


def _base_image_folder(out: Path, base_images: Path | None) -> Path:
    """Where base_image.ensure keeps the image. The profile's qemu paths are relative to OUT
    (base-image/current/...), so a shared cache is reached through OUT/base-image as a link."""
    local = out / "base-image"
    if base_images is None:
        return local
    shared = Path(base_images).resolve()
    if local.resolve() == shared:  # the default box's own folder, or the link made by an earlier run
        return shared
    if local.exists() and not local.is_symlink():
        raise E2EError(f"{local} is a folder of its own; remove it to share the base images in {shared}")
    out.mkdir(parents=True, exist_ok=True)
    local.unlink(missing_ok=True)
    local.symlink_to(shared, target_is_directory=True)
    return shared


def _check_box(out: Path, box: str, box_files: list[Path]) -> tuple[Path, Path]:
    """The libvirt .box the post-processor made, and its catalogue entry pointing at it."""
    made = [Path(b) for b in box_files if Path(b).name == f"{box}-libvirt.box"]
    if not made or not made[0].is_file():
        raise E2EError(f"the build produced no libvirt box (got: {', '.join(map(str, box_files)) or 'nothing'})")
    box_file = made[0]
    path = catalogue.catalogue_path(out, box)
    if not path.is_file():
        raise E2EError(f"no box catalogue {path} after the build")
    data = json.loads(path.read_text(encoding="utf-8"))
    providers = [p for v in data.get("versions", []) for p in v.get("providers", [])]
    libvirt = [p for p in providers if p.get("name") == "libvirt"]
    if data.get("name") != catalogue.BOX_PREFIX + box or not libvirt:
        raise E2EError(f"{path} does not list {catalogue.BOX_PREFIX}{box} with a libvirt provider: {data}")
    entry = libvirt[-1]
    if entry.get("url") != box_file.resolve().as_uri():
        raise E2EError(f"{path} points at {entry.get('url')}, not at {box_file}")
    digest = hashlib.sha256()
    with open(box_file, "rb") as fh:
        while chunk := fh.read(8 * 1024 * 1024):
            digest.update(chunk)
    if entry.get("checksum") != digest.hexdigest():
        raise E2EError(f"{path} records sha256 {entry.get('checksum')} for {box_file}, the file has {digest.hexdigest()}")
    return box_file, path


def _proxy_proof(text: str, component_files: list[str]) -> dict:
    """The build guest's apt went through the proxy: indexes and packages, fetched with 200; and
    no box component did: those come from the host cache over Packer's HTTP server."""
    lines, unparsed = squid.parse_access_log(text)
    found = squid.summary(lines)
    components = [l for l in lines if any(l.url.split("?")[0].endswith("/" + name) for name in component_files)]
    found["component_requests"] = len(components)
    found["component_bytes"] = sum(l.bytes for l in components)
    apt = squid.apt_requests(lines)
    index_ok = [l for l in apt if l.url.endswith("InRelease") and l.status == 200]
    debs_ok = [l for l in apt if l.url.endswith(".deb") and l.status == 200]
    problems = []
    if unparsed:
        problems.append(f"{len(unparsed)} access-log lines are not in the expected format, e.g. {unparsed[0]!r}")
    if not index_ok:
        problems.append("no apt index (InRelease) was fetched through the proxy")
    if not debs_ok:
        problems.append("no package (.deb) was fetched through the proxy")
    failed_debs = [f for f in found["failed"] if f.endswith(".deb")]
    if failed_debs:
        problems.append(f"the proxy answered errors for packages: {', '.join(failed_debs[:5])}")
    if components:
        problems.append("the guest downloaded box components itself: " + ", ".join(l.url for l in components[:5]))
    if problems:
        raise E2EError("the proxy configured in cluster.yml was not used as it must be by the build guest: "
                       + "; ".join(problems) + f" ({found['lines']} access-log lines in all)")
    found["samples"] = [f"{l.client} {l.code}/{l.status} {l.method} {l.url} \"{l.agent}\"" for l in (index_ok[:1] + debs_ok[:2])]
    return found


def _spec_result(out: Path, box: str) -> dict | None:
    """The spec's own result file, when test_ssh_target raised after the spec ran."""
    path = out / "reports" / f"test-box-{box}.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None


# Every regular file on the guest's root filesystem (-xdev: not /proc, /sys, /dev, /run), searched
# for the pattern on standard input, so it never appears on a command line that sudo would log.
SECRET_SCAN = r"""
pattern="$(cat)"
echo "files $(find / -xdev -type f | wc -l)"
find / -xdev -type f -print0 | xargs -0 -r grep -lsF --devices=skip -e "$pattern" || true
"""


def _scan(guest: guest_mod.Guest, pattern: str, ph, what: str) -> tuple[int, list[str]]:
    res = guest.ssh.run(f"sudo -n bash -c {shlex.quote(SECRET_SCAN)}", ph, what, input=pattern)
    lines = res.stdout.splitlines()
    files = int(lines[0].split()[1]) if lines and lines[0].startswith("files ") else 0
    return files, [line for line in lines[1:] if line.strip()]


# The journal through journalctl, which reads every journal file (--merge: also those of the build
# VM's machine id, and /run's) and decompresses long fields, which journald compresses on 24.04, so a
# grep of the files misses them. --output=export prints every field, not only MESSAGE (what
# --grep searches). The pattern comes on standard input, as above; --sync writes what journald holds.
JOURNAL_SCAN = r"""
pattern="$(cat)"
journalctl --sync
echo "entries $(journalctl --merge --no-pager --output=export | grep -ca '^__CURSOR=')"
echo "matches $(journalctl --merge --no-pager --output=export | grep -caF -e "$pattern" || true)"
"""


def _scan_journal(guest: guest_mod.Guest, pattern: str, ph, what: str) -> tuple[int, int]:
    res = guest.ssh.run(f"sudo -n bash -c {shlex.quote(JOURNAL_SCAN)}", ph, what, input=pattern)
    counts = dict(line.split() for line in res.stdout.splitlines() if len(line.split()) == 2)
    try:
        return int(counts["entries"]), int(counts["matches"])
    except (KeyError, ValueError):
        raise E2EError(f"{what}: unexpected output {res.stdout!r}") from None


def _secret_scan(guest: guest_mod.Guest, credentials: squid.Credentials, ph) -> dict:
    """No file of the box, and no journal entry, holds the build proxy's password. The same scan
    for the box user's passwd entry must find /etc/passwd, and the journal scan a marker logged just
    before: a scan that finds nothing proves nothing otherwise."""
    _, control = _scan(guest, f"{base_image.BOX_USER}:x:", ph, "control scan for the box user")
    files, holding = _scan(guest, credentials.password, ph, "scan the box for the proxy password")
    marker = f"k4w-e2e-journal-control-{secrets.token_hex(8)}"
    guest.ssh.run("logger -t k4w-e2e", ph, "log the journal scan's control marker", input=marker + "\n")
    _, journal_control = _scan_journal(guest, marker, ph, "control scan of the journal")
    entries, matches = _scan_journal(guest, credentials.password, ph, "scan the journal for the proxy password")
    found = {"files": files, "holding": holding, "control": control,
             "journal_entries": entries, "journal_matches": matches, "journal_control": journal_control}
    if "/etc/passwd" not in control or files < 1000:
        raise E2EError(f"the secret scan does not work: {files} files scanned, the control pattern found {control}")
    if journal_control < 1 or entries < 10:
        raise E2EError(f"the journal scan does not work: {entries} entries read, the logged marker found {journal_control} times")
    if holding:
        raise E2EError(f"the box keeps the build proxy's password in: {', '.join(holding)}")
    if matches:
        raise E2EError(f"the box's journal holds the build proxy's password in {matches} entries")
    return found


# Public host keys are readable by the box user: no sudo.
HOST_KEYS = 'for key in /etc/ssh/ssh_host_*_key.pub; do ssh-keygen -l -f "$key"; done'


def _compare_host_keys(first: guest_mod.Guest, second: guest_mod.Guest, ph) -> dict:
    def fingerprints(guest: guest_mod.Guest, which: str) -> list[str]:
        res = guest.ssh.run(HOST_KEYS, ph, f"SSH host keys of the {which} VM")
        return sorted(line.split()[1] for line in res.stdout.splitlines() if len(line.split()) > 1)

    keys = {"first": fingerprints(first, "first"), "second": fingerprints(second, "second")}
    keys["shared"] = sorted(set(keys["first"]) & set(keys["second"]))
    if not keys["first"] or not keys["second"]:
        raise E2EError(f"no SSH host keys to compare: {keys}")
    if keys["shared"]:
        raise E2EError(f"two VMs from the same box share SSH host keys {', '.join(keys['shared'])}: the box ships its keys")
    return keys


def _idempotence(template: dict, guest: guest_mod.Guest, proxy: squid.Squid, ph, result: E2EResult) -> str:
    ssh = guest.ssh

    def snapshot(when: str) -> idempotence.Snapshot:
        res = ssh.run("sudo -n bash -s", ph, f"snapshot {when} the re-run", input=idempotence.SNAPSHOT_SCRIPT)
        return idempotence.parse(res.stdout)

    before = snapshot("before")
    offset = proxy.offset()
    result.rerun_steps = rerun.run_all(template, ssh, ph)
    after = snapshot("after")
    changes = idempotence.diff(before, after)
    _, unexpected = idempotence.classify(changes, before, after)
    lines, _ = squid.parse_access_log(proxy.text_since(offset))
    apt = squid.apt_requests(lines)
    result.proxy_rerun = squid.summary(lines)
    result.idempotence = idempotence.report(before, after, changes) + [
        f"squid access log during the re-run: {len(lines)} requests, {len(apt)} by apt"
        + "".join(f"\n    {l.method} {l.url}" for l in apt[:10])
    ]
    if unexpected or apt:
        raise E2EError("the second provisioning run changed the guest:\n  " + "\n  ".join(result.idempotence))
    return f"{len(changes)} change(s), all expected; {len(lines)} proxy requests"


# ------------------------------------------------------------------ plumbing


def _keep_proxy_logs(workdir: Path, out: Path) -> None:
    """squid's logs are the proxy evidence: keep them in OUT/logs beside e2e.log."""
    for name in ("access.log", "cache.log"):
        source = workdir / "squid" / name
        if source.is_file():
            target = out / "logs" / f"e2e-squid-{name}"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)


def _sigterm_raises() -> Callable[[], None]:
    """SIGTERM (CI cancelling the job) unwinds like Ctrl-C, so the guest and squid are stopped."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, handler)
    return lambda: signal.signal(signal.SIGTERM, previous)


def _air_gap(cluster: Cluster, box: str, home: Path, registries, offline: dict, cluster_text) -> Cluster:
    """The air-gapped host of issue 36's workflow, on this machine: `invoke bundle` of the connected host's
    cluster (its caches warm, so the registries are not asked), then a second cluster.yml in `home` whose component
    and image caches are empty and which has no k4w-pins.yml, filled by `invoke bundle-import` alone. Its Cluster
    is returned: the bake uses it, so every component and image the guest gets came out of the bundle. The
    registries stay up only so that any request to them is counted (the bake must make none)."""
    counted = registries.request_counts()
    archive = home / "bundle.tar"
    manifest = bake_commands.make_bundle(cluster, str(archive), box)
    home.mkdir(parents=True, exist_ok=True)
    config_file = home / "cluster.yml"
    config_file.write_text(cluster_text(str(home / "cache")), encoding="utf-8")
    started = time.monotonic()
    imported = bake_commands.import_bundle(str(config_file), str(archive))
    import_seconds = round(time.monotonic() - started, 1)
    if pins.load(config_file) != pins.load(cluster.config_file):
        raise E2EError(f"bundle-import wrote {pins.pins_path(config_file)} unlike the connected host's "
                       f"{pins.pins_path(cluster.config_file)}")
    air_gapped = Cluster.resolve(config.load(config_file), config_file)
    fetched = fetch.fetch(air_gapped, [box])
    images = image_cache.fetch(air_gapped, [box])
    if fetched.count("downloaded") or fetched.failed or images.fetched or images.failed:
        raise E2EError(f"after bundle-import the air-gapped host still downloads: {fetched.summary()}; {images.summary()}")
    offline["bundle"] = {
        "file": str(archive), "bytes": archive.stat().st_size, "components": len(manifest["components"]),
        "images": len(manifest["images"]), "import_seconds": import_seconds, "imported_bytes": imported.bytes,
        "pins_added": len(imported.pinned), "fetch": f"{fetched.summary()}; {images.summary()}",
        "requests": registries.request_count(since=counted)}
    if offline["bundle"]["requests"]:
        raise E2EError(f"making and importing the bundle asked the registries {offline['bundle']['requests']} time(s)")
    return air_gapped


def _dry_run(out: Path, box: str, base_images: Path | None, say: Callable[[str], None], cluster: bool = False,
             offline: bool = False) -> E2EResult:
    """Say exactly what a run would do; run and write nothing."""
    profile = profiles.load(box)
    q = profile.data.build.qemu
    cache = Path(base_images).resolve() if base_images else out / "base-image"
    recipe = recipe_of(profile)
    key = base_image.cache_key(recipe)
    cached = (cache / key / base_image.MANIFEST).is_file()
    say(f"e2e dry run of the CI box {box} into {out} (total budget {TOTAL_BUDGET_S} s; phases: {', '.join(BUDGETS)})")
    say(f"base image {recipe.name} {cache / key}: " + ("reused (cached)" if cached else "would build: $ " + shlex.join(base_image.debootstrap_command(cache / key / 'rootfs', recipe))
                                         + f"; then chroot setup, $ mkfs.ext4 -d rootfs disk.raw {recipe.disk_size}"))
    say("proxy: $ squid -N -f <tmp>/squid/squid.conf  (127.0.0.1:<free port>, guests use http://10.0.2.2:<port>)")
    say("mirror: on http://127.0.0.1:<free port>, " + mirror_mod.describe(profile))
    if offline:
        made = ("written as CI stand-ins (ci/e2e/seed_stand_ins.py images)" if profile.container_runtime == "docker"
                else "built from the pinned tools")
        say(f"registries: the box's images ({', '.join(image_inventory.box_images(profile))}) {made} "
            f"into {out / 'cluster-images'}, pushed to distribution registries on 127.0.0.1 (one per upstream)")
    say("render: <tmp>/cluster.yml:\n" + cluster_file.text(
        "http://10.0.2.2:<port>", "http://127.0.0.1:<free port>", str(out / "component-cache"), box, emulated_cpu=cluster,
        registry={"mirrors": {u: {"endpoint": "https://127.0.0.1:<free port>", "ca": "<tmp>/registries/tls/ca.pem"}
                              for u in registry_mod.UPSTREAMS}} if offline else None))
    if offline:
        say("pin images: k4w.bake.commands.pin_images (the image cache emptied first), then render again with the digests; "
            "packer build: registry_requests_during_bake from the registries' access logs, which must be 0")
    say(f"fetch: k4w.bake.fetch into {out / 'component-cache'}; build-* stages the files in "
        f"{out / 'http' / box / 'components'} for Packer's HTTP server")
    if offline:
        say("bundle: k4w.bake.commands.make_bundle into <tmp>/air-gapped/bundle.tar, then import_bundle into a second "
            "cluster.yml there whose caches and k4w-pins.yml are empty; its fetch must download nothing and the bake "
            "uses it")
    say("packer build (k4w.bake.build_box, forced): " + "; ".join(
        packer_cli.describe_command(packer_cli.build_command(out / "packer" / f"{box}.pkr.hcl"), out, {},
                                    first=packer_cli.init_command(out / "packer" / f"{box}.pkr.hcl"))))
    say("boot guest: box.img from " + str(out / "boxes" / f"{box}-libvirt.box") + " on a qcow2 overlay: $ " + shlex.join(
        guest_mod.qemu_command(Path("<tmp>/guest/overlay.qcow2"), cache / recipe.name / base_image.KERNEL,
                               cache / recipe.name / base_image.INITRD, q.append, memory_mb=int(profile.data.build.memory_mb),
                               cpus=int(profile.data.build.cpus), ssh_port=0, serial_log=Path("<tmp>/guest/serial.log"),
                               pidfile=Path("<tmp>/guest/qemu.pid"))).replace("127.0.0.1:0-", "127.0.0.1:<free port>-"))
    say(f"box spec: k4w.verify.flows.test_ssh_target({box}, vagrant@127.0.0.1:<port>, Vagrant's insecure key, stage box)")
    say("idempotence: snapshot (" + ", ".join(idempotence.ROOTS) + "; units " + ", ".join(idempotence.SERVICES)
        + "; dpkg), re-run every provisioner of the rendered template, snapshot again, diff")
    if cluster:
        for line in cluster_run.plan(out, box, netplan=recipe.netplan):
            say(line)
    return E2EResult(out=out, log=out / "logs" / "e2e.log", box=box, dry_run=True)
