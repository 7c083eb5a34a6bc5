"""Build boxes with Packer: render, check the ISO, skip what is up to date, run, collect.

One box or several in parallel, each with its own log (OUT/logs/<box>.log, credentials
redacted) and its own progress line. A box lands in OUT/boxes/ only after Packer succeeded;
a failure removes what the build left and names the log, the failing step and the error.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import os
import shutil
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator
from urllib.parse import unquote, urlsplit

from rich.console import Console

from k4w.media import iso as iso_mod
from k4w.media import build_media
from k4w.infra import files as outfiles
from k4w.infra import packer_hcl, proc
from k4w.model import profiles
from k4w.infra import sources
from k4w.derive import registry
from k4w import render
from k4w.derive.cluster import Cluster
from k4w.derive.values import Proxy, proxy_env
from k4w.derive.step_env import step_env
from k4w.infra.errors import K4wError
from k4w.model.profiles import Profile
from k4w.infra.redact import redact, register_secret
from k4w.bake import catalogue, fetch, gate, image_cache, stamp as stamp_mod
from k4w.derive import images
from k4w.infra import packer_cli
from .progress import PlainView, RichView, elapsed, hash_progress, make_view
from .transcript import COMMA, BuildState

# The variable the Windows template reads the per-build Administrator password from
# (docs/internals.md, "Packer templates").
ADMIN_PASSWORD_ENV = "K4W_ADMIN_PASSWORD"
# Signals that end k4w, each forwarded to Packer as one interrupt (SIGBREAK: Ctrl-Break on Windows).
FORWARDED_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP", "SIGBREAK")


class BuildFailed(K4wError):
    """One or more boxes did not build. The message names each log and failing step."""

    def __init__(self, message: str, results: list["BoxResult"]):
        self.results = results
        super().__init__(message)


# The input variable of templates/packer/*.pkr.hcl.j2 that names the ISO to install from.
ISO_PATH_VARIABLE = "iso_path"


@dataclass
class BoxPlan:
    box: str
    profile: Profile
    template_path: Path
    template: dict
    stamp: stamp_mod.Stamp
    up_to_date: bool
    reason: str  # why it is built or skipped
    existing_box: Path | None = None
    iso_override: Path | None = None
    iso_sha256: str | None = None
    iso: iso_mod.IsoCheck | None = None

    @property
    def target(self) -> gate.Target:
        return gate.Target(self.profile, self.template, self.iso_override, self.iso_sha256)

    @property
    def packer_variables(self) -> dict[str, str]:
        """The input variables the build gives Packer on its command line: --iso as iso_path, so
        Packer installs from the file the gate verified, not from iso/ (the template's default).
        Absolute: Packer runs in --out, not where the user named the file."""
        if self.iso_override is None:
            return {}
        return {ISO_PATH_VARIABLE: os.path.abspath(self.iso_override)}


@dataclass
class BoxResult:
    box: str
    status: str  # built | up to date | failed | interrupted | timed out | would build | would skip
    seconds: float = 0.0
    log: Path | None = None
    message: str = ""
    box_files: list[Path] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status in ("built", "up to date", "would build", "would skip")


# ------------------------------------------------------------------ entry points


def build_box(cluster: Cluster, box: str, out: Path, *, iso: Path | None = None, iso_sha256: str | None = None,
              force: bool = False, dry_run: bool = False, console: Console | None = None) -> BoxResult:
    """Build one box (invoke build-windows / build-ubuntu). Raises BuildFailed on failure.

    iso_sha256: the expected checksum of --iso when the caller made that image itself.
    """
    isos = {box: Path(iso)} if iso else None
    sums = {box: iso_sha256} if iso_sha256 else None
    return build_boxes(cluster, [box], out, force, dry_run, isos=isos, iso_sha256s=sums, console=console)[0]


def build_boxes(cluster: Cluster, boxes: list[str], out: Path, force: bool = False, dry_run: bool = False, *,
                isos: dict[str, Path] | None = None, iso_sha256s: dict[str, str] | None = None,
                console: Console | None = None) -> list[BoxResult]:
    """Build several boxes in parallel (invoke build). Raises BuildFailed if any failed."""
    cfg = cluster.config
    out = Path(out).resolve()
    console = console or Console()
    boxes = list(dict.fromkeys(boxes))
    unused = [b for b in boxes if b not in cfg.boxes()]
    if unused:
        raise K4wError(
            f"box {', '.join(unused)} is not used by any node in the config, so it is not rendered "
            f"(boxes in use: {', '.join(cfg.boxes())})"
        )
    _register_proxy_secrets(cluster)
    if not dry_run:
        render.render(cluster, out)
    # Placeholder secrets: the stamp must not change when the Administrator password rotates.
    rendered = render.render_files(cluster, out, secrets_for=None)
    plans = [_plan(cluster.profile(box), out, rendered, force, (isos or {}).get(box), (iso_sha256s or {}).get(box),
                   console) for box in boxes]
    if dry_run:
        return _dry_run(plans, out, console, cluster)
    return _Builder(cluster, out, console).run(plans)


# ------------------------------------------------------------------ deciding what to do


def packer_proxy_env(proxy: Proxy) -> dict[str, str]:
    """The resolved model's proxy (k4w.derive.cluster.Cluster.proxy) as Packer's environment, empty
    without one: Packer downloads the Ubuntu ISO itself when iso/ has none. NO_PROXY leads with the
    private ranges (packer_cli.PRIVATE_RANGES says why)."""
    no_proxy = [*packer_cli.PRIVATE_RANGES, *(n for n in proxy.no_proxy if n not in packer_cli.PRIVATE_RANGES)]
    return proxy_env(proxy.http, proxy.https, ",".join(no_proxy) if proxy.enabled else None)


def _register_proxy_secrets(cluster: Cluster) -> None:
    """Proxy passwords are redacted even where they appear outside a URL (a guest may echo one)."""
    cfg = cluster.config
    # The registry mirrors' credentials too (cluster.yml registry.mirrors), and the base64 drop-in
    # that carries them to the guest (k4w.derive.step_env).
    auth = registry.auth_toml(cfg)
    if auth:
        register_secret(base64.b64encode(auth.encode("utf-8")).decode("ascii"))
    mirror_passwords = [urlsplit(mirror.endpoint).password for mirror in cfg.registry.mirrors.values()]
    for password in (*cluster.proxy.passwords, *mirror_passwords):
        if password:
            for form in {password, unquote(password)}:
                register_secret(form)
                register_secret(form.replace(",", COMMA))  # as Packer's machine-readable output writes it


def _plan(profile: Profile, out: Path, rendered: dict[str, str], force: bool, iso_override: Path | None,
          iso_sha256: str | None, console: Console) -> BoxPlan:
    box = profile.name
    key = packer_hcl.rel_path(box)
    template = packer_hcl.parse(rendered[key], f"rendered {key}", root=(out / key).parent)
    stamp = stamp_mod.compute(box, profile, rendered, iso_mod.iso_sha256(profile))
    plan = BoxPlan(box, profile, out / key, template, stamp, up_to_date=False, reason="", iso_override=iso_override,
                   iso_sha256=iso_sha256)
    if iso_override is not None and ISO_PATH_VARIABLE not in (template.get("variables") or {}):
        raise K4wError(f"box {box}: --iso names an ISO, but its template {out / key} installs from none "
                       f"(no input variable {ISO_PATH_VARIABLE}; build.builder {(profile.data.get('build') or {}).get('builder', 'hyperv-iso')})")
    record = catalogue.read_record(out, box)
    existing = out / "boxes" / record["box_file"] if record and record.get("box_file") else None
    plan.existing_box = existing
    if force:
        plan.reason = "forced (--force)"
    elif record is None:
        plan.reason = "no previous build"
    elif not existing or not existing.is_file():
        plan.reason = f"box file {existing} is missing"
    elif (record.get("stamp") or {}).get("sha256") != stamp.sha256:
        changed = stamp.changed_since(record.get("stamp"))
        shown = ", ".join(changed[:8]) + (f" and {len(changed) - 8} more" if len(changed) > 8 else "")
        plan.reason = f"inputs changed: {shown}"
    else:
        differs = _box_differs_from_record(box, existing, record, catalogue.record_path(out, box), console)
        plan.up_to_date = differs is None
        plan.reason = differs or f"up to date: {existing} (stamp {stamp.sha256[:12]}, size and sha256 as recorded)"
    return plan


def _box_differs_from_record(box: str, path: Path, record: dict, record_file: Path, console: Console) -> str | None:
    """Why the box on disk is not the one its record describes (truncated, replaced, or moved in
    by a build that crashed before it wrote its record); None when size and sha256 match. The
    size is checked first: hashing a 10 GB box takes minutes."""
    size, expected = record.get("box_size"), record.get("box_sha256")
    actual_size = path.stat().st_size
    if not expected:
        return f"{record_file} has no box_sha256 to check {path} against"
    if size is not None and size != actual_size:
        return f"box file {path} is {actual_size} bytes but {record_file} says {size}: it is truncated or another file"
    with hash_progress(console, f"{box}: {path.name}", actual_size) as progress:
        actual = iso_mod.sha256_file(path, progress)
    if actual != expected:
        return f"box file {path} has sha256 {actual}, but {record_file} says {expected}: it is not the box that was built"
    return None


def _say(console: Console, text: str) -> None:
    console.print(redact(text), markup=False, highlight=False, soft_wrap=True)


def _verdict(problems: list[str], ok: str) -> list[str]:
    return [f"WOULD FAIL: {p}" for p in problems] or [ok]


def _dry_run(plans: list[BoxPlan], out: Path, console: Console, cluster: Cluster) -> list[BoxResult]:
    """Print what a build would do and every refusal the real build would make (gate.decide,
    the same call); run nothing and write nothing. Raises BuildFailed when the build would refuse."""
    results: list[BoxResult] = []
    to_build = [plan for plan in plans if not plan.up_to_date]
    # The validators read files: give them a render in a private scratch folder, never --out.
    with gate.scratch_render(cluster) as scratch:
        decision = gate.decide(cluster, [plan.target for plan in to_build], out, scratch, console, write_cache=False)
    if to_build:
        packer = packer_cli.packer_path()
        for line in _verdict(decision.packer, f"{packer} {packer_cli.version_str(packer_cli.packer_version())}"):
            _say(console, f"packer: {line}")
        for line in _verdict(decision.host, "can run the templates' builders"):
            _say(console, f"this host: {line}")
        for line in _verdict(decision.validation, "every validator of `invoke validate` accepts the render"):
            _say(console, f"validate: {line}")
    proxy = packer_proxy_env(cluster.proxy)
    for plan in plans:
        box = plan.box
        _say(console, f"== {box}")
        _say(console, f"  render: {plan.template_path} and {out / 'http' / box}/ (not written in a dry run)")
        if plan.up_to_date:
            _say(console, f"  would skip, {plan.reason}")
            results.append(BoxResult(box, "would skip", message=plan.reason))
            continue
        _say(console, f"  would build: {plan.reason}")
        provider = packer_hcl.box_provider(plan.template)
        builder = next((b.get("type") for b in plan.template.get("builders", [])), None)
        _say(console, f"  builder: {builder}, a {provider or 'unknown'} box ({cluster.config_file or 'cluster.yml'} "
                      f"host.provider {cluster.config.host.provider})")
        check = decision.isos.get(box)
        if check and check.mode == "remote":
            _say(console, f"  iso: {check.describe()}")
        elif check:
            how = "hash cached and matching" if check.cached else "sha256 matches" if check.actual else \
                "sha256 computed before Packer starts"
            _say(console, f"  iso: would verify {check.path} against {check.expected} ({check.source}; {how})")
        if plan.profile.is_windows and packer_hcl.installs_with_qemu(plan.template):
            _say(console, f"  virtio-win: would verify {iso_mod.virtio_win_path(plan.profile)} against "
                          f"{iso_mod.virtio_win_sha256(plan.profile) or 'its sha256 once invoke iso-add records it'}")
        for problem in decision.boxes.get(box, []):
            _say(console, f"  WOULD FAIL: {problem}")
        _say(console, "  downloads (the host cache first, as `invoke fetch --box " + box + "`):")
        for line in fetch.describe(cluster, [box])[0]:
            _say(console, f"    {line}")
        _say(console, f"    then staged in {build_media.folder(out, box)} for {build_media.delivery(plan.profile)}; "
                      "the guest checks each hash again")
        secret_sources = {name: f"{cluster.config_file or 'cluster.yml'} proxy"
                          for name in step_env(plan.profile, cluster).secret_environment}
        if plan.profile.is_windows:
            secrets_file = out / "secrets" / f"{box}.json"
            _say(console, f"  secrets: would rotate {secrets_file} and re-render {out / 'http' / box}/ with the new password")
            secret_sources[ADMIN_PASSWORD_ENV] = str(secrets_file)
        _say(console, "  run:")
        for line in packer_cli.describe_command(packer_cli.build_command(plan.template_path, variables=plan.packer_variables), out, secret_sources, proxy,
                                                first=packer_cli.init_command(plan.template_path)):
            _say(console, f"    {line}")
        minutes = profiles.build_timeout_minutes(plan.profile)
        _say(console, f"  timeout: {minutes:g} min (build.timeout_minutes), then Packer is interrupted and stopped")
        _say(console, f"  log: {out / 'logs' / f'{box}.log'}")
        _say(console, f"  then: move {out / 'boxes' / '.partial'}/{box}-{provider or '<provider>'}.box to {out / 'boxes'}/, "
                      f"write {catalogue.catalogue_path(out, box)} and {catalogue.record_path(out, box)}")
        results.append(BoxResult(box, "would build", message=plan.reason))
    if decision.refused:
        raise BuildFailed("dry run: the build would refuse before Packer starts:\n"
                          + "\n".join(f"  - {line}" for line in decision.lines()), results)
    return results


# ------------------------------------------------------------------ running


@contextlib.contextmanager
def _forwarding_signals(handler) -> Iterator[None]:
    """While Packer runs, every terminating signal k4w gets goes to handler (in the main thread):
    Packer runs in its own process group, so nothing else would tell it, and it would outlive us."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for name in FORWARDED_SIGNALS:
        number = getattr(signal, name, None)
        # A signal ignored when k4w started stays ignored: `nohup invoke build-windows &` asks that
        # closing the terminal (SIGHUP) leave the build running, as POSIX programs honour it.
        if number is not None and signal.getsignal(number) is not signal.SIG_IGN:
            previous[number] = signal.signal(number, lambda signum, _frame: handler(signum))
    try:
        yield
    finally:
        for number, old in previous.items():
            signal.signal(number, old)


class _Builder:
    def __init__(self, cluster: Cluster, out: Path, console: Console):
        self.cluster = cluster
        self.out = out
        self.console = console
        self.procs: dict[str, proc.Process] = {}
        self.lock = threading.Lock()
        self.interrupted: str | None = None  # the signal that interrupted the build
        self.deadlines: dict[str, float] = {}  # box -> when its build.timeout_minutes runs out
        self.timed_out: set[str] = set()
        self.kill_at: dict[str, float] = {}  # box -> when its Packer group is killed if still running
        self.packer_version: str | None = None

    def run(self, plans: list[BoxPlan]) -> list[BoxResult]:
        results: dict[str, BoxResult] = {}
        for plan in plans:
            if plan.up_to_date:
                _say(self.console, f"{plan.box}: {plan.reason}")
                results[plan.box] = BoxResult(plan.box, "up to date", message=plan.reason, box_files=[plan.existing_box])
            else:
                _say(self.console, f"{plan.box}: building, {plan.reason}")
        to_build = [p for p in plans if p.box not in results]
        if to_build:
            decision = gate.decide(self.cluster, [p.target for p in to_build], self.out, self.out, self.console)
            if decision.everywhere:
                everywhere = gate.Decision(host=decision.host, packer=decision.packer, validation=decision.validation)
                raise K4wError(f"refusing to build {', '.join(p.box for p in to_build)}; Packer was not started:\n"
                               + "\n".join(f"  - {line}" for line in everywhere.lines()))
            for plan in to_build:
                plan.iso = decision.isos.get(plan.box)
                if plan.iso:
                    _say(self.console, f"{plan.box}: iso {plan.iso.describe()}")
                problems = decision.boxes.get(plan.box)
                if problems:
                    listed = "\n".join(f"  - {p}".replace("\n", "\n    ") for p in problems)
                    results[plan.box] = BoxResult(plan.box, "failed", message=f"{plan.box}: refusing to build:\n{listed}")
        to_build = [p for p in to_build if p.box not in results]
        components: dict[str, dict[str, Path]] = {}
        if to_build:
            components, refused = self._fetch_components(to_build)
            results.update(refused)
        importing = [p for p in to_build if p.box not in results and images.imported(self.cluster.config, p.profile)]
        if importing:
            results.update(self._fetch_images(importing))
        to_build = [p for p in to_build if p.box not in results]
        if to_build:
            for plan in to_build:
                if plan.profile.is_windows:
                    render.rotate_secrets(self.out, plan.box)
            # Render again so Autounattend.xml carries the new passwords.
            render.render(self.cluster, self.out)
            for plan in to_build:
                self._stage_media(plan, components.get(plan.box, {}))
            self.packer_version = packer_cli.version_str(packer_cli.packer_version())
            results.update(self._run_parallel(to_build))
        ordered = [results[p.box] for p in plans]
        self._summary(ordered)
        failed = [r for r in ordered if not r.ok]
        if failed:
            raise BuildFailed("\n".join(r.message for r in failed), ordered)
        return ordered

    def _fetch_components(self, plans: list[BoxPlan]) -> tuple[dict[str, dict[str, Path]], dict[str, BoxResult]]:
        """The host cache first (k4w.bake.fetch): every download of these boxes, verified, with
        the summary a user of `invoke fetch` sees. A box whose files are not all there is refused."""
        report = fetch.fetch(self.cluster, [p.box for p in plans], console=self.console)
        fetch.show(report, self.console)
        refused = {}
        for plan in plans:
            failed = [row for row in report.failed if plan.box in row.item.boxes]
            if failed:
                listed = "\n".join(f"  - {row.item.component}: {row.problem}" for row in failed)
                refused[plan.box] = BoxResult(plan.box, "failed", message=f"{plan.box}: refusing to build, "
                                              f"{len(failed)} download(s) are not in the component cache {report.root}:\n{listed}")
        return report.paths(), refused

    def _fetch_images(self, plans: list[BoxPlan]) -> dict[str, BoxResult]:
        """downloads.images: cache: the host image cache first (k4w.bake.image_cache), each image at its pinned
        digest. A box with an image that is not pinned, or could not be pulled, is refused naming the command."""
        report = image_cache.fetch(self.cluster, [p.box for p in plans], console=self.console)
        image_cache.show(report, self.console)
        refused = {}
        for plan in plans:
            rows = [row for row in report.rows if plan.box in row.item.boxes]
            problems = [f"  - {row.item.label}: {row.problem}" for row in rows if row.status == "failed"]
            problems += [f"  - {row.item.label}: no digest pinned in k4w-pins.yml" for row in rows
                         if row.status != "failed" and not row.item.pinned]
            if problems:
                refused[plan.box] = BoxResult(plan.box, "failed", message=(
                    f"{plan.box}: refusing to build, downloads.images is cache and {len(problems)} image(s) are not in "
                    f"the image cache {report.root} at a pinned digest (run `invoke pin-images --box {plan.box}`):\n"
                    + "\n".join(problems)))
        return refused

    def _stage_media(self, plan: BoxPlan, files: dict[str, Path]) -> None:
        staged = build_media.stage(self.out, plan.profile, files)
        size = sum(path.stat().st_size for path in staged)
        _say(self.console, f"{plan.box}: {len(staged)} verified download(s), {iso_mod.human_size(size)}, staged in "
                           f"{build_media.folder(self.out, plan.box)} for {build_media.delivery(plan.profile)}; "
                           "the guest downloads none of them")
        if images.imported(self.cluster.config, plan.profile):
            archives = image_cache.stage(self.cluster, plan.box, build_media.folder(self.out, plan.box))
            _say(self.console, f"{plan.box}: {len(archives)} image archive(s), "
                               f"{iso_mod.human_size(sum(a.stat().st_size for a in archives))}, staged beside them; "
                               "the guest imports them and pulls none")
        if plan.profile.is_windows:
            problems = build_media.cd_file_problems(list(build_media.folder(self.out, plan.box).iterdir()))
            if problems:
                raise K4wError(f"{plan.box}: the build CD cannot carry what is staged for it: " + "; ".join(problems))

    def _run_parallel(self, plans: list[BoxPlan]) -> dict[str, BoxResult]:
        view = make_view(self.console)
        with _forwarding_signals(self._on_signal), view, \
                ThreadPoolExecutor(max_workers=len(plans), thread_name_prefix="packer") as pool:
            futures = {pool.submit(self._run_box, plan, view): plan for plan in plans}
            pending = set(futures)
            while pending:
                _, pending = wait(pending, timeout=0.5)
                self._enforce_deadlines()
        return {plan.box: future.result() for future, plan in futures.items()}

    def _live(self) -> dict[str, proc.Process]:
        with self.lock:
            return {box: p for box, p in self.procs.items() if p.poll() is None}

    def _on_signal(self, signum: int) -> None:
        """Ctrl-C, SIGTERM, SIGHUP: ask each Packer to cancel (it deletes its VM), once; a second
        signal kills them. After SIGTERM or SIGHUP, whoever sent it expects us gone soon: Packer
        gets proc.STOP_GRACE seconds to cancel, then its whole group is killed."""
        name = signal.Signals(signum).name
        with self.lock:
            second = self.interrupted is not None
            self.interrupted = self.interrupted or name
        live = self._live()
        if second:
            _say(self.console, f"{name} again: killing Packer; a VM may be left in Hyper-V Manager (k4w-*)")
            for packer in live.values():
                packer.kill_all()
            return
        if signum == signal.SIGINT:
            _say(self.console, "interrupted: asking Packer to cancel and clean up (Ctrl-C again to kill)")
        else:
            _say(self.console, f"{name}: asking Packer to cancel and clean up, killing it after {proc.STOP_GRACE} s")
            with self.lock:
                for box in live:
                    self.kill_at.setdefault(box, time.monotonic() + proc.STOP_GRACE)
        for packer in live.values():
            packer.interrupt()

    def _enforce_deadlines(self) -> None:
        """build.timeout_minutes: interrupt a Packer that ran out of time; kill it after the grace."""
        now = time.monotonic()
        for box, packer in self._live().items():
            if box not in self.timed_out and now >= self.deadlines.get(box, float("inf")):
                self.timed_out.add(box)
                with self.lock:
                    self.kill_at.setdefault(box, now + proc.STOP_GRACE)
                packer.interrupt()
            if now >= self.kill_at.get(box, float("inf")):
                packer.kill_all()

    def _run_box(self, plan: BoxPlan, view: PlainView | RichView) -> BoxResult:
        box, out = plan.box, self.out
        log_path = out / "logs" / f"{box}.log"
        partial = out / "boxes" / ".partial"
        started = dt.datetime.now(dt.timezone.utc)
        clock = time.monotonic()
        state = BuildState.for_template(plan.template)
        view.add(box, state)
        _remove_partial(partial, box)
        try:
            # The templates read every secret from Packer's environment, none is in packer/*.pkr.hcl.
            secrets = step_env(plan.profile, self.cluster).secret_environment
            secret_files = {k: f"{self.cluster.config_file or 'cluster.yml'} proxy" for k in secrets}
            if plan.profile.is_windows:
                secrets[ADMIN_PASSWORD_ENV] = render.load_secrets(out, box)["admin_password"]
                secret_files[ADMIN_PASSWORD_ENV] = str(out / "secrets" / f"{box}.json")
            packer = packer_cli.packer_path() or packer_cli.PACKER
            init = packer_cli.init_command(plan.template_path, packer)
            cmd = packer_cli.build_command(plan.template_path, packer, plan.packer_variables)
            proxy = packer_proxy_env(self.cluster.proxy)
            env = packer_cli.build_env(out, secrets, proxy)
            with outfiles.open_for_write(log_path, within=out) as log:
                log.write(f"# k4w build {box} started {started.isoformat(timespec='seconds')}\n")
                for line in packer_cli.describe_command(cmd, out, secret_files, proxy, first=init):
                    log.write(f"# {line}\n")
                init_rc = self._init(init, env, log)
                rc = self._stream(plan, cmd, env, log, state, view) if init_rc == 0 else init_rc
            seconds = time.monotonic() - clock
            if init_rc != 0:
                result = self._failed(plan, state, log_path, seconds,
                                      f"packer init exited with code {init_rc}: the template's required plugins are not "
                                      f"installed and could not be (the output is in {log_path})")
            elif rc == 0 and box not in self.timed_out:
                result = self._collect(plan, state, started, log_path, seconds)
            else:
                result = self._failed(plan, state, log_path, seconds, f"Packer exited with code {rc}")
        except Exception as exc:  # noqa: BLE001 - any failure of one box must not stop the others
            result = self._failed(plan, state, log_path, time.monotonic() - clock, f"{type(exc).__name__}: {exc}")
        if log_path.is_file() and not log_path.is_symlink():
            with outfiles.open_for_write(log_path, within=out, append=True) as log:
                log.write("# result: " + redact(result.message).replace("\n", "\n# ") + "\n")
        view.finish(box, f"{result.status} in {elapsed(result.seconds)}")
        return result

    def _init(self, cmd, env, log) -> int:
        """`packer init`: installs the template's required_plugins, a no-op when they are (the pinned
        cache, a user's earlier build). Its output goes to the box's log; it asks nothing."""
        result = proc.run(cmd, cwd=self.out, env=env, timeout=600)
        log.write(redact(result.output))
        if result.returncode != 0:
            log.write(f"# packer init exited with code {result.returncode}\n")
        return result.returncode

    def _stream(self, plan: BoxPlan, cmd, env, log, state, view) -> int:
        box = plan.box
        # Own process group: a terminal Ctrl-C reaches only us, and we forward exactly one
        # interrupt, so Packer cancels once and cleans up its VM.
        packer = proc.start(cmd, cwd=self.out, env=env, group=True)
        with self.lock:
            self.procs[box] = packer
            self.deadlines[box] = time.monotonic() + profiles.build_timeout_minutes(plan.profile) * 60
            if self.interrupted:
                packer.interrupt()
        try:
            for raw in packer.lines():
                line = redact(raw.rstrip("\r\n"))
                log.write(line + "\n")
                log.flush()
                for event in state.feed(line):
                    view.event(box, event)
            return packer.wait()
        finally:
            # Whatever Packer left in its group (a plugin) goes with it: nothing outlives the build.
            packer.kill_all()
            packer.wait()

    def _collect(self, plan: BoxPlan, state: BuildState, started: dt.datetime, log_path: Path, seconds: float) -> BoxResult:
        box, out = plan.box, self.out
        partial = out / "boxes" / ".partial"
        found = _partial_boxes(partial, box)
        if not found:
            return self._failed(plan, state, log_path, seconds,
                                f"Packer succeeded but wrote no box to {partial}/{box}-<provider>.box; the template's "
                                f"vagrant post-processor must write there (docs/internals.md)")
        # Read first: an unreadable guest record fails the build before any box is moved into place.
        guest = catalogue.read_guest_release(out, box)
        version = catalogue.box_version(started)
        providers = []
        finals = []
        # The old record goes first: a crash before the new one is written leaves a box without a
        # record, which the next build rebuilds, never skips.
        catalogue.record_path(out, box).unlink(missing_ok=True)
        for partial_box in found:
            provider = partial_box.name[len(box) + 1:-len(".box")]
            state.phase = f"sha256 of {partial_box.name}"  # minutes for a 10 GB box: say so
            sha = iso_mod.sha256_file(partial_box)
            final = out / "boxes" / f"{box}-{provider}.box"
            os.replace(partial_box, final)
            finals.append(final)
            providers.append(catalogue.box_catalogue(box, plan.profile, version, provider, final, sha)["versions"][0]["providers"][0])
        meta = catalogue.box_catalogue(box, plan.profile, version, providers[0]["name"], finals[0], providers[0]["checksum"])
        meta["versions"][0]["providers"] = providers
        finished = dt.datetime.now(dt.timezone.utc)
        iso = plan.iso
        record = catalogue.build_record(
            box=box, profile=plan.profile, version=version, provider=providers[0]["name"], box_file=finals[0],
            box_sha256=providers[0]["checksum"], box_size=finals[0].stat().st_size, started=started, finished=finished,
            packer_version=self.packer_version,
            iso={"name": plan.profile.data.iso.name, "sha256": iso.expected if iso else None,
                 "source": (f"downloaded by Packer from {iso.url}" if iso and iso.mode == "remote" else str(iso.path) if iso else None)},
            stamp=plan.stamp.as_record(), git=catalogue.git_revision(sources.REPO.root), guest=guest,
        )
        catalogue.write_json(catalogue.catalogue_path(out, box), meta)
        catalogue.write_json(catalogue.record_path(out, box), record)
        _remove_partial(partial, box)
        shutil.rmtree(out / "packer-vm" / box, ignore_errors=True)
        return BoxResult(box, "built", seconds, log_path, f"{box}: built {', '.join(str(f) for f in finals)}", finals)

    def _failed(self, plan: BoxPlan, state: BuildState, log_path: Path, seconds: float, fallback: str) -> BoxResult:
        box, out = plan.box, self.out
        _remove_partial(out / "boxes" / ".partial", box)
        shutil.rmtree(out / "packer-vm" / box, ignore_errors=True)
        if box in self.timed_out:
            status = "timed out"
            minutes = profiles.build_timeout_minutes(plan.profile)
            fallback = (f"the build ran longer than {minutes:g} min (build.timeout_minutes in "
                        f"{plan.profile.path}); Packer was stopped")
            error = fallback
        else:
            status = "interrupted" if (state.interrupted or self.interrupted) else "failed"
            error = state.last_error or fallback
            if self.interrupted and self.interrupted != "SIGINT":
                error += f" ({self.interrupted} received)"
        message = (
            f"{box}: build {status} at {state.where} after {elapsed(seconds)}\n"
            f"  error: {redact(error)}\n"
            f"  full log: {log_path}"
        )
        return BoxResult(box, status, seconds, log_path, message)

    def _summary(self, results: list[BoxResult]) -> None:
        rows = [("box", "result", "duration", "log")]
        for r in results:
            rows.append((r.box, r.status if r.ok else r.status.upper(), elapsed(r.seconds) if r.seconds else "-", str(r.log or "-")))
        widths = [max(len(row[i]) for row in rows) for i in range(3)]
        _say(self.console, "")
        for row in rows:
            _say(self.console, "  ".join(cell.ljust(widths[i]) if i < 3 else cell for i, cell in enumerate(row)))
        # A failure's message is not repeated here: BuildFailed carries it, and the CLI prints it once.


def _partial_boxes(partial: Path, box: str) -> list[Path]:
    """<box>-<provider>.box files. Provider names have no '-', so box 'ubuntu-1604' never
    claims 'ubuntu-1604-e2e-qemu.box' of a box named 'ubuntu-1604-e2e'."""
    return sorted(p for p in partial.glob(f"{box}-*.box") if "-" not in p.name[len(box) + 1:-len(".box")])


def _remove_partial(partial: Path, box: str) -> None:
    """Delete this box's partial output only: another box may be writing beside it."""
    for leftover in _partial_boxes(partial, box) + [catalogue.guest_release_path(partial.parent.parent, box)]:
        with contextlib.suppress(FileNotFoundError):
            leftover.unlink()
    with contextlib.suppress(OSError):
        partial.rmdir()  # only when empty
