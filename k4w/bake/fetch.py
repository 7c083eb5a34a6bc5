"""`invoke fetch`: download every component the configured boxes need into the host cache, once.

Each file goes through k4w.infra.download (the cluster's proxy, Range resume, verify-or-delete)
into the layout of k4w.bake.cache. A component with neither a profile checksum nor a user pin
is refused with the `invoke pin` command that fixes it; the others still download. A failure
of one file never stops the others; the run fails at the end, naming each.
"""

from __future__ import annotations

import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from k4w.infra import ui
from k4w.derive.cluster import Cluster
from k4w.derive.values import Proxy
from k4w.infra.errors import K4wError
from k4w.media.iso import human_size
from . import cache
from k4w.infra.download import DownloadError, Expected, download
from .progress import FilesProgress

# Four downloads at once: a box's four or five components overlap their latency (GitHub's
# release redirects, dl.k8s.io), while a corporate proxy sees fewer connections than one browser
# opens to a single host (six in Chrome and Firefox), which keeps rate limits and IDS rules quiet.
WORKERS = 4
# A checksum file beside a download (sha256_url) is a line or two; anything bigger is not one.
CHECKSUM_FILE_MAX = 64 * 1024


@dataclass
class Row:
    item: cache.Item
    status: str  # cached | downloaded | failed
    size: int | None = None
    fetched: int = 0
    problem: str = ""


@dataclass
class Report:
    root: Path
    rows: list[Row] = field(default_factory=list)

    @property
    def fetched(self) -> int:
        return sum(r.fetched for r in self.rows)

    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.rows)

    @property
    def failed(self) -> list[Row]:
        return [r for r in self.rows if r.status == "failed"]

    def paths(self) -> dict[str, dict[str, Path]]:
        """{box: {component: cached file}} of every file that is in the cache, verified."""
        out: dict[str, dict[str, Path]] = {}
        for row in self.rows:
            if row.status != "failed":
                for box in row.item.boxes:
                    out.setdefault(box, {})[row.item.component] = row.item.path(self.root)
        return out

    def summary(self) -> str:
        return (f"fetched {self.fetched} bytes ({self.count('downloaded')} files downloaded, "
                f"{self.count('cached')} already cached)")


class _Cancelled(Exception):
    """Raised inside a worker's progress callback after Ctrl-C: its .part stays for a resume."""


def _expected(item: cache.Item, proxy: Proxy | None) -> Expected:
    """The checksum to verify against; a sha256_url is read first, through the same proxy."""
    checksum = item.checksum
    if checksum.key in ("sha256", "sha512"):
        return Expected(checksum.key, checksum.value)
    with tempfile.TemporaryDirectory(prefix="k4w-sum-") as tmp:
        got = download(checksum.value, Path(tmp) / "checksum", None, proxy)
        if got.size > CHECKSUM_FILE_MAX:
            raise DownloadError(f"{checksum.value}: {got.size} bytes is not a checksum file")
        text = got.path.read_text(encoding="utf-8", errors="replace")
    token = text.split()[0].lower() if text.split() else ""
    if len(token) != 64 or any(c not in "0123456789abcdef" for c in token):
        raise DownloadError(f"{checksum.value}: does not start with a sha256 (read {text[:80]!r})")
    return Expected("sha256", token)


def _fetch_one(item: cache.Item, manifest: cache.Manifest, proxy: Proxy | None, config_file,
               bars: FilesProgress, stop: threading.Event) -> Row:
    if item.checksum is None:
        commands = "; ".join(item.pin_commands(config_file))
        return Row(item, "failed", problem=f"{item.version} ({item.url}) has no checksum in its profile and no user pin, "
                                           f"so it was not downloaded; run: {commands}")
    entry = manifest.fresh(item)
    if entry:
        return Row(item, "cached", entry["size"])
    update = bars.callback(item.label)

    def progress(done: int, total: int | None) -> None:
        if stop.is_set():
            raise _Cancelled()
        update(done, total)

    try:
        got = download(item.source, item.path(manifest.root), _expected(item, proxy), proxy, progress,
                       on_wait=lambda: ui.say(f"{item.label}: another k4w process is downloading "
                                              f"{item.path(manifest.root)}; waiting for it"))
    except (K4wError, OSError) as exc:
        bars.finish(item.label, "failed")
        return Row(item, "failed", problem=str(exc))
    manifest.record(item, got)
    if got.fetched_bytes:
        bars.finish(item.label, f"downloaded {human_size(got.fetched_bytes)}")
        return Row(item, "downloaded", got.size, got.fetched_bytes)
    return Row(item, "cached", got.size)  # on disk but not as recorded: hashed again, and it matched


def fetch(cluster: Cluster, boxes: list[str] | None = None, *, cache_option: str | None = None,
          console: Console | None = None) -> Report:
    """Fill the cache for these boxes (default: every box the config uses); never raises for one
    file's failure: the report's rows say what happened to each."""
    root = cache.cache_dir(cluster.config, cluster.config_file, cache_option)
    items = cache.plan(cluster, boxes)
    manifest = cache.Manifest(root)
    report = Report(root)
    stop = threading.Event()
    with FilesProgress(console or ui.console) as bars, ThreadPoolExecutor(WORKERS, thread_name_prefix="k4w-fetch") as pool:
        futures = [pool.submit(_fetch_one, item, manifest, cluster.proxy, cluster.config_file, bars, stop) for item in items]
        try:
            report.rows = [f.result() for f in futures]
        except (KeyboardInterrupt, _Cancelled):
            stop.set()  # workers stop at their next block; each keeps its .part to resume
            pool.shutdown(wait=True, cancel_futures=True)
            raise KeyboardInterrupt from None
    return report


def show(report: Report, console: Console | None = None) -> None:
    """The summary table and the one line that says how many bytes this run fetched."""
    rows = [[", ".join(r.item.boxes), r.item.component, r.item.relpath.rsplit("/", 1)[1],
             human_size(r.size) if r.size is not None else "-", r.status, r.fetched] for r in report.rows]
    ui.table(f"Component cache {report.root}", ["box", "component", "file", "size", "status", "bytes fetched"], rows, to=console)
    ui.say(report.summary(), to=console)


def failure_message(report: Report) -> str:
    lines = [f"{len(report.failed)} of {len(report.rows)} component(s) are not in the cache:"]
    lines += [f"  {row.item.label}: {row.problem}" for row in report.failed]
    return "\n".join(lines)


def ensure(cluster: Cluster, boxes: list[str] | None = None, *, cache_option: str | None = None,
           console: Console | None = None) -> dict[str, dict[str, Path]]:
    """What build-* calls before Packer starts: fetch, show the summary, and return
    {box: {component: verified file in the cache}}; a K4wError names every file that failed."""
    report = fetch(cluster, boxes, cache_option=cache_option, console=console)
    show(report, console)
    if report.failed:
        raise K4wError(failure_message(report))
    return report.paths()


def dry_run(cluster: Cluster, boxes: list[str] | None = None, *, cache_option: str | None = None) -> int:
    """Say what a fetch would do, offline, writing nothing; returns how many components it would refuse."""
    root = cache.cache_dir(cluster.config, cluster.config_file, cache_option)
    ui.say(f"dry run: component cache {root} (nothing is downloaded or written)")
    lines, refused = describe(cluster, boxes, cache_option=cache_option)
    for line in lines:
        ui.say(f"  {line}")
    return refused


NO_CHECKSUM = "no checksum"


def states(cluster: Cluster, boxes: list[str] | None = None, cache_option: str | None = None
           ) -> tuple[Path, list[tuple[cache.Item, str]]]:
    """Offline: the cache folder, and each download with its state there (verified, changed,
    missing, or no checksum: a fetch would refuse it)."""
    root = cache.cache_dir(cluster.config, cluster.config_file, cache_option)
    manifest = cache.Manifest(root)
    return root, [(item, NO_CHECKSUM if item.checksum is None else manifest.status(item))
                  for item in cache.plan(cluster, boxes)]


def describe(cluster: Cluster, boxes: list[str] | None = None, *, cache_option: str | None = None) -> tuple[list[str], int]:
    """Offline: one line per component (what a fetch would do with it), and how many it would refuse."""
    root, found = states(cluster, boxes, cache_option)
    lines = []
    for item, state in found:
        if state == NO_CHECKSUM:
            lines.append(f"{item.label}: refused, no checksum; run: {'; '.join(item.pin_commands(cluster.config_file))}")
            continue
        what = {"verified": "cached and verified, nothing to do",
                "changed": f"on disk but changed since verified: hash again, re-download {item.source} if it differs",
                "missing": f"would download {item.source}"}[state]
        lines.append(f"{item.label}: {what} -> {item.path(root)} (verify {item.checksum.key} from {item.checksum.source})")
    return lines, sum(state == NO_CHECKSUM for _, state in found)


def box_summary(cluster: Cluster, box: str) -> str:
    """One offline line for a plan: how many of a box's downloads are cached and verified."""
    root, found = states(cluster, [box])
    found_states = [state for _, state in found]
    counts = ", ".join(f"{found_states.count(state)} {state}" for state in ("verified", "changed", "missing", NO_CHECKSUM)
                       if state in found_states)
    return f"{len(found)} download(s) in {root}: {counts or 'none'}"
