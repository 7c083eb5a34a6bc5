"""Glue between the Invoke tasks and the package: settings, the one dry-run rule, user errors.

Every task resolves its settings here (command-line options win over Invoke configuration),
loads its Cluster once, and renders through `rendered`, which is where a dry run differs:
it renders into memory and shows what it would write, and nothing reaches --out.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import functools
import time
from dataclasses import dataclass
from pathlib import Path

from invoke.exceptions import Exit

from k4w.infra import files as outfiles
from k4w.outdir import lock as outlock
from k4w import render as render_mod, validate as validate_mod
from k4w.infra import signals, ui
from k4w.infra import sources
from k4w.derive.cluster import Cluster
from k4w.defaults import DEFAULTS  # noqa: F401 (k4w.commands.cli.DEFAULTS, as before)
from k4w.infra.errors import K4wError
from k4w.outdir import swap



@dataclass(frozen=True)
class Settings:
    config: str
    out: Path  # absolute
    dry_run: bool


# What the running task holds until it returns (the --out lock); user_errors opens it per task.
_TASK_HOLDS: contextvars.ContextVar[contextlib.ExitStack | None] = contextvars.ContextVar("k4w_task_holds", default=None)
# The config a task validated before it took the lock, so that load() does not read it twice.
_TASK_CLUSTER: contextvars.ContextVar[tuple[str, Cluster] | None] = contextvars.ContextVar("k4w_task_cluster", default=None)


def settings(c, config: str | None = None, out: str | None = None, dry_run: bool = False,
             uses_out: bool = True) -> Settings:
    """A task's settings from its options and c.config.k4w. Invoke's own `invoke --dry` is
    another spelling of --dry-run.

    uses_out: the task works in --out. Then an --out no command could write is refused here,
    naming it, and a real run holds the --out lock until the task returns (outlock): a second
    k4w command on the same folder is refused, told who holds it, and the task sees the managed
    folders whole (k4w.outdir.swap.finish_swap). A dry run writes nothing, so it takes no lock.
    """
    k4w = c.config.k4w
    chosen_out = k4w.out if out is None else out
    if not str(chosen_out).strip():
        # An unset shell variable (--out "$OUT") must not silently mean ./build.
        raise K4wError('--out is empty: name a folder (the default is "build")')
    s = Settings(
        config=config or k4w.config,
        out=Path(chosen_out).resolve(),
        dry_run=bool(dry_run or k4w.dry_run or c.config.run.dry),
    )
    if uses_out:
        outfiles.check_out(s.out, repository=sources.REPO.root)
        holds = _TASK_HOLDS.get()
        if holds is not None and not s.dry_run:
            # A bad or missing config is refused before --out or its lock exist (docs/output-folder.md "--out").
            _TASK_CLUSTER.set((s.config, Cluster.load(s.config)))
            holds.enter_context(outlock.hold(s.out))
            # A render that crashed after its commit is finished before this task reads --out.
            swap.finish_swap(s.out)
        elif swap.swap_pending(s.out):
            # A dry run reads --out without the lock, and finishes nothing: say what it sees.
            ui.say(f"warning: {swap.pending_swap_message(swap.swap_pending(s.out))}", style="yellow")
    return s


def user_errors(fn):
    """Turn a K4wError or an OSError into one red line and exit code 1, the way a user expects a
    CLI to fail; Ctrl-C or SIGTERM into one line and 130 or 143 (k4w.infra.signals). What the task holds
    (the --out lock) is released first."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            with signals.task(), contextlib.ExitStack() as holds:
                token, loaded = _TASK_HOLDS.set(holds), _TASK_CLUSTER.set(None)
                try:
                    return fn(*args, **kwargs)
                finally:
                    _TASK_CLUSTER.reset(loaded)
                    _TASK_HOLDS.reset(token)
        except ui.StdoutError as exc:
            ui.stdout_lost()
            ui.error(str(exc))
            raise Exit(code=1) from None
        except K4wError as exc:
            ui.error(str(exc))
            raise Exit(code=1) from None
        except OSError as exc:
            ui.error(describe_os_error(exc))
            raise Exit(code=1) from None
        except KeyboardInterrupt as exc:
            code, line = signals.outcome(exc)
            ui.error(line)
            raise Exit(code=code) from None

    return wrapper


# What a user can do about the errors a disk gives; the rest speak for themselves.
_OS_ERROR_HINTS = {
    errno.ENOSPC: "free space on that disk, or point --out at another one",
    errno.EROFS: "that disk is mounted read-only; point --out at a writable folder",
    errno.EACCES: "this user may not write there; point --out at a folder you own",
    errno.EPERM: "this user may not write there; point --out at a folder you own",
}


def describe_os_error(exc: OSError) -> str:
    """One line naming the path and the reason, e.g. "build/secrets/x.json: No space left on
    device (free space on that disk, or point --out at another one)"."""
    reason = exc.strerror or str(exc)
    where = f"{exc.filename}" + (f" -> {exc.filename2}" if exc.filename2 else "") if exc.filename else None
    hint = _OS_ERROR_HINTS.get(exc.errno)
    text = f"{where}: {reason}" if where else reason
    return text + (f" ({hint})" if hint else "")


def load(s: Settings) -> Cluster:
    """The task's Cluster: the one settings already validated before taking the lock, else loaded now."""
    loaded = _TASK_CLUSTER.get()
    if loaded is not None and loaded[0] == s.config:
        return loaded[1]
    return Cluster.load(s.config)


def rendered(cluster: Cluster, s: Settings) -> dict[str, str]:
    """Render every artifact: written to --out, or for a dry run only in memory and listed."""
    if s.dry_run:
        # Placeholder secrets: a dry run must not create OUT/secrets/.
        files = render_mod.render_files(cluster, s.out)
        ui.say(f"dry run: would render {len(files)} artifacts from {s.config} into {s.out} (nothing is written):")
        for rel in sorted(files):
            ui.say(f"  {s.out / rel}")
        for box, prof in cluster.profiles.items():
            secrets = render_mod.secrets_path(s.out, box)
            if prof.is_windows and not secrets.is_file():
                ui.say(f"  {secrets} (generated Administrator password, mode 0600)")
        return files
    started = time.monotonic()
    files = render_mod.render(cluster, s.out)
    ui.say(f"rendered {len(files)} artifacts from {s.config} into {s.out} in {time.monotonic() - started:.2f} s")
    return files


def validate(cluster: Cluster, s: Settings, files: dict[str, str]) -> None:
    """Run every validator on the rendered --out (a dry run shows their commands); Exit 1 on a failure."""
    if s.dry_run:
        ui.say("dry run: validate would run:")
        for line in validate_mod.would_run(cluster, s.out, files):
            if line.startswith("#"):  # a check done in this process, not a command
                ui.say(line)
            else:
                ui.command(line)
        return
    rows = []

    def report(res: validate_mod.Result) -> None:
        status = "ok" if res.ok else f"FAILED ({len(res.problems)})"
        ui.say(f"{'✓' if res.ok else '✗'} {res.validator}: {len(res.checked)} checked by {res.tool} in {res.seconds:.1f} s")
        for problem in res.problems:
            ui.say(f"    {problem}", style="red")
        for note in res.notes:
            ui.say(f"    note: {note}", style="yellow")
        rows.append([res.validator, res.tool, len(res.checked), status, f"{res.seconds:.1f}"])

    results = validate_mod.validate_all(cluster, s.out, report)
    ui.table("Validation", ["artifact", "checked by", "files", "result", "seconds"], rows)
    if not all(r.ok for r in results):
        raise Exit("validation failed", code=1)


def cluster_up(cluster: Cluster, s: Settings, files: dict[str, str]) -> None:
    """cluster-up from the render just made; a dry run reads a scratch copy of it, never --out."""
    from k4w import cluster as cluster_stage

    if not s.dry_run:
        cluster_stage.cluster_up(cluster, s.out)
        return
    with swap.scratch_copy(files) as artifacts:
        cluster_stage.cluster_up(cluster, s.out, dry_run=True, artifacts=artifacts)


def build_on_hyperv(cluster: Cluster, s: Settings) -> None:
    """The last step of `invoke all`: build every box, but only where Hyper-V can."""
    from k4w.commands import doctor
    from k4w.bake import commands

    blocking = [chk for chk in doctor.host_checks() if not chk.ok]
    if blocking:
        ui.say(f"\nnot building: {blocking[0].detail}. The plan above is what a Hyper-V host runs.", style="yellow")
        return
    ui.say("\nHyper-V host detected: building the boxes", style="bold")
    commands.build(cluster, s.out, dry_run=s.dry_run, console=ui.console)
