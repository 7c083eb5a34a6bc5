"""The atomic swap of --out's managed folders: a render is staged in OUT/.render-XXXX/ and committed
by one atomic rename of a commit record, so bad input, a crash or Ctrl-C leaves --out wholly old or
wholly new. What is staged, and which folders a render may replace, is the caller's (k4w.render)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from k4w.infra import files as outfiles, ui
from k4w.outdir import lock as outlock, private

# The folders of --out that a render owns and a swap replaces. boxes/, logs/, secrets/ and state
# survive a render.
MANAGED = ("packer", "http", "vagrant", "manifests", "kubeadm", "nodes")
# The rendered folders whose files may hold a credential, so every file in them is owner-only
# (k4w.private): preseed.cfg and user-data the apt proxy, Autounattend.xml the Administrator
# password (base64, which is no protection). The Packer templates read their secrets from the
# environment and hold none; they stay private should a template ever inline one.
PRIVATE = ("packer", "http")
# The commit record of a render swap (write_atomically); not named .render-* so that the sweep of
# leftover staging folders never takes it for one.
SWAP_RECORD = ".swap-commit.json"
# Staging and trash folders of interrupted renders, and a commit record's own temp file.
LEFTOVERS = (".render-*", ".old-*", f".{SWAP_RECORD}.*.tmp")  # outfiles.write_file's temp name


def write_atomically(files: dict[str, str], out: Path, root_files: dict[str, str] | None = None,
                     before: Callable[[Path], None] | None = None) -> None:
    """Stage the render in OUT/.render-XXXX/, commit it, then move the managed folders in, and
    root_files ({name: text}, e.g. the render's own list of files) into OUT's root.

    Windows cannot rename a folder over a non-empty one, and folder symlinks need a privilege
    there, so the switch cannot be one rename of the folders themselves. Its commit is one
    atomic rename instead: SWAP_RECORD names the staged render. Before it, --out is untouched (a
    failure, Ctrl-C or SIGTERM only leaves a staging folder, swept by the next render); from it
    on, Ctrl-C and SIGTERM wait until the swap is finished (then the command stops, exit 130 or 143). A
    process killed outright leaves SWAP_RECORD: every k4w task that holds the --out lock finishes
    the swap before it reads, and those that read without the lock (doctor, dry runs) report it
    (swap_pending). before(OUT) runs under the lock once an earlier swap is finished, before
    anything is staged: the caller's refusal of an --out it may not replace (k4w.render.owned).
    """
    out = Path(out).resolve()
    with outlock.hold(out):
        outfiles.refuse_links(out / SWAP_RECORD, out)
        finish_swap(out)
        if before is not None:
            before(out)
        staging = Path(tempfile.mkdtemp(prefix=".render-", dir=out))
        committed = False
        try:
            _write_tree(files, staging, durable=True)
            for name, text in (root_files or {}).items():
                outfiles.write_file(staging / name, text, within=staging)
            trash = out / (".old-" + staging.name.removeprefix(".render-"))
            fresh = sorted(name for name in MANAGED if (staging / name).exists())
            record = {"staging": staging.name, "trash": trash.name, "fresh": fresh}
            with interrupts_deferred():
                outfiles.write_file(out / SWAP_RECORD, json.dumps(record) + "\n", within=out)  # the commit
                committed = True
                try:
                    finish_swap(out)
                except KeyboardInterrupt:
                    finish_swap(out)  # committed: complete it before giving up, so --out is never mixed
                    raise
        except BaseException:
            if not committed:
                shutil.rmtree(staging, ignore_errors=True)
            raise


def swap_pending(out: Path) -> Path | None:
    """The commit record of a render swap that a killed process left unfinished, if any: a reader
    without the --out lock then sees some managed folders new and some old."""
    record = Path(out) / SWAP_RECORD
    return record if record.is_file() else None


def pending_swap_message(record: Path) -> str:
    return (f"{record.parent} holds an unfinished render ({record.name}: a render was killed while it switched the "
            f"folders), so packer/, http/, vagrant/, manifests/, kubeadm/ and nodes/ may be of two renders; "
            f"any k4w command on it that writes (e.g. invoke render --out {record.parent}) completes it first")


@contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM until the block is done, then hand the first one to the handler it
    would have reached (k4w.signals in a task: KeyboardInterrupt, exit 130 or 143): a committed swap
    is always finished by the process that started it, unless it is killed outright."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    wanted = [signal.SIGINT] + ([signal.SIGTERM] if hasattr(signal, "SIGTERM") else [])
    previous = {signum: signal.signal(signum, lambda signum, frame: received.append(signum)) for signum in wanted}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if received:
        handler = previous[received[0]]
        if callable(handler):
            handler(received[0], None)
        raise KeyboardInterrupt


def finish_swap(out: Path) -> None:
    """Complete a committed swap (idempotent), then sweep staging and trash folders left by
    interrupted renders. Run under the --out lock."""
    record_path = out / SWAP_RECORD
    if record_path.is_file():
        try:
            record = json.loads(record_path.read_text(encoding="utf-8"))
            staging, trash, fresh = out / record["staging"], out / record["trash"], set(record["fresh"])
            # Only folders of this very --out: a record must never move anything elsewhere.
            if not (staging.parent == trash.parent == out and staging.name.startswith(".render-")
                    and trash.name.startswith(".old-")):
                raise ValueError(record)
        except (ValueError, KeyError, TypeError, RecursionError):
            # write_file never leaves half a record; one that does not parse was not written by k4w.
            ui.say(f"warning: ignoring {record_path}: it is not a render commit record", style="yellow")
        else:
            trash.mkdir(exist_ok=True)
            for name in MANAGED:
                current, new, old = out / name, staging / name, trash / name
                if name in fresh and not new.exists():
                    continue  # already moved in
                if current.exists() or current.is_symlink():
                    if old.exists():
                        shutil.rmtree(old)
                    current.rename(old)
                if new.exists():
                    new.rename(current)
            # The staged root files (write_atomically's root_files): the folders are moved above.
            for staged in sorted(staging.iterdir()) if staging.is_dir() else []:
                if staged.is_file() and not staged.is_symlink():
                    os.replace(staged, out / staged.name)
            outfiles.sync_folder(out)
        record_path.unlink(missing_ok=True)
    for pattern in LEFTOVERS:
        for leftover in out.glob(pattern):
            if leftover.is_dir() and not leftover.is_symlink():
                shutil.rmtree(leftover, ignore_errors=True)
            else:
                leftover.unlink(missing_ok=True)


@contextmanager
def scratch_copy(files: dict[str, str]) -> Iterator[Path]:
    """An in-memory render as a private temporary folder, deleted afterwards: for a dry run's
    readers that only take a folder, so that nothing is written under --out."""
    with tempfile.TemporaryDirectory(prefix="k4w-dry-run-") as folder:
        _write_tree(files, Path(folder))
        yield Path(folder)


# The folders of OUT/packer/ that hold byte-for-byte copies of checkout files
# (k4w.render.templates.SHIPPED): written without newline translation.
SHIPPED_FOLDERS = ("guest", "vagrant")


def _verbatim(rel: str) -> bool:
    """A shipped copy of a checkout file, written byte for byte (no newline translation on a
    Windows host: a bash script with CRLF line ends fails in the guest)."""
    parts = rel.split("/")
    return len(parts) > 2 and parts[0] == "packer" and parts[1] in SHIPPED_FOLDERS


def _write_tree(files: dict[str, str], folder: Path, durable: bool = False) -> None:
    """Write files into a fresh folder; those under PRIVATE are restricted to this user before
    their text is written (k4w.private). durable: fsync each file, so that a committed render
    survives a power cut whole."""
    for rel, text in files.items():
        target = folder / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        opener = private.open_private if rel.split("/", 1)[0] in PRIVATE else outfiles.open_for_write
        with outfiles.naming(target), opener(target, within=folder) as fh:
            if _verbatim(rel):
                fh.flush()
                fh.buffer.write(text.encode("utf-8"))
            else:
                fh.write(text)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        if _verbatim(rel) and text.startswith("#!"):
            # A script stays runnable as its checkout copy is (a shell-local provisioner runs it
            # directly); still its owner's alone, as every file under packer/ (PRIVATE).
            target.chmod(0o700)

