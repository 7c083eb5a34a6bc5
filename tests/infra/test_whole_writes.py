"""Two k4w processes on one host share the caches, k4w-pins.yml and the ISO catalogue (a `fetch` in
one terminal and a `pin-images` or `bundle-import` in another, or two `build`s). Two defects of one
kind lose their work: a record read, changed and written back without a lock keeps only the last
writer's change; a fixed temp name (`<name>.part`) lets two writers write into one file, and the
loser's rename fails or moves the winner's half-written file into place.

The rule (static): a file is replaced only through k4w.infra.files (a temp name unique to the
caller), except the few places listed below with their reason. The behaviour: every record
another process may update keeps every writer's entries when writers race."""

from __future__ import annotations

import ast
import multiprocessing
from pathlib import Path

import pytest

from tests.helpers import ROOT as REPO

# Files that may rename or move a file themselves, and why that is safe there.
RENAMES_ALLOWED = {
    "k4w/infra/files.py": "the one whole-file writer (replacing, move_into)",
    "k4w/infra/download.py": "its <name>.part has a fixed name on purpose, so a later run resumes it; written only under the file's own lock",
    "k4w/outdir/swap.py": "swaps whole folders of OUT, under OUT's lock",
    "k4w/bake/runner.py": "moves the box Packer wrote inside OUT, under OUT's lock",
    "k4w/devtools/gotools.py": "installs a built tool under that tool's build lock",
}
RENAMING = {("os", "replace"), ("os", "rename"), ("os", "renames"), ("shutil", "move")}


def renames(tree: ast.AST) -> list[int]:
    """Lines that rename or move a file: os.replace/rename, shutil.move, and Path.replace/rename (one
    argument; str.replace takes two)."""
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        owner = node.func.value.id if isinstance(node.func.value, ast.Name) else None
        if (owner, node.func.attr) in RENAMING or (node.func.attr in ("replace", "rename") and owner not in ("os", "shutil")
                                                   and len(node.args) == 1 and not node.keywords):
            lines.append(node.lineno)
    return lines


def rename_sites(root: Path) -> dict[str, list[int]]:
    found = {}
    for path in sorted((root / "k4w").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        lines = renames(ast.parse(path.read_text(encoding="utf-8")))
        if lines and rel not in RENAMES_ALLOWED:
            found[rel] = lines
    return found


def test_files_are_replaced_only_through_the_whole_file_writer():
    assert rename_sites(REPO) == {}, (
        "replace these through k4w.infra.files.replacing / write_file / write_bytes / move_into (a temp name "
        "unique to the caller), or add the file to RENAMES_ALLOWED with the reason it is safe")


def test_the_rule_sees_each_kind_of_rename():
    plants = ["os.replace(a, b)", "os.rename(a, b)", "shutil.move(a, b)", "part.replace(path)", "Path(x).rename(y)"]
    for plant in plants:
        assert renames(ast.parse(plant)) == [1], plant
    assert renames(ast.parse("name.replace('a', 'b')")) == []


def test_every_allowed_file_still_renames(tmp_path):
    """An allowance whose reason has gone (the code moved to files.py) is removed, not kept."""
    unused = [rel for rel in RENAMES_ALLOWED if not renames(ast.parse((REPO / rel).read_text(encoding="utf-8")))]
    assert unused == []


# --- the shared records, raced ------------------------------------------------------------------

WRITERS, ENTRIES = 3, 12
DIGEST = "sha256:" + "ab" * 32


def _pins(base: Path, writer: int) -> None:
    from k4w.model import pins
    for n in range(ENTRIES):
        pins.record_images(base / "cluster.yml", {(f"example.test/w{writer}/i{n}:1", "linux/amd64"): DIGEST})


def _image_record(base: Path, writer: int) -> None:
    from k4w.bake import image_cache
    from k4w.derive.images import Needed
    from k4w.infra.image_platform import Platform
    record = image_cache.Record(base)
    for n in range(ENTRIES):
        record.save(Needed(f"example.test/w{writer}/i{n}:1", Platform("linux", "amd64"), ("b",)), DIGEST, 1, "test")


def _layout_index(base: Path, writer: int) -> None:
    from k4w.infra import image_pull
    for n in range(ENTRIES):
        image_pull._write_index(base, f"example.test/w{writer}/i{n}:1",
                                image_pull.Fetched(image_pull.OCI_MANIFEST, DIGEST, b"{}"), {"os": "linux", "architecture": "amd64"})


def _component_index(base: Path, writer: int) -> None:
    from k4w.bake import cache
    from k4w.infra.download import Downloaded
    for n in range(ENTRIES):
        item = cache.Item(("b",), f"c{writer}", str(n), f"https://example.test/{writer}/{n}", f"https://example.test/{writer}/{n}",
                          None, f"c{writer}/{n}/f")
        path = item.path(base)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
        cache.Manifest(base).record(item, Downloaded(path, 1, "00" * 32, "00" * 64, 0))


def _iso_catalogue(base: Path, writer: int) -> None:
    from k4w.media import iso, iso_add
    iso.catalogue_path = lambda: base / "catalogue.yml"   # in this worker process only
    iso_add.catalogue_path = iso.catalogue_path
    for n in range(ENTRIES):
        iso_add._write_catalogue_entry(f"w{writer}-{n}.iso", {"sha256": "00" * 32})


def _pins_names(base: Path) -> set[str]:
    from k4w.model import pins
    return set((pins.load(base / "cluster.yml").get(pins.IMAGES) or {}))


def _image_record_names(base: Path) -> set[str]:
    from k4w.bake import image_cache
    return {key.split(" ")[0] for key in image_cache.Record(base).read()}


def _layout_names(base: Path) -> set[str]:
    import json
    from k4w.infra import image_pull
    index = json.loads((base / "index.json").read_text(encoding="utf-8"))
    return {m["annotations"][image_pull.CONTAINERD_NAME] for m in index["manifests"]}


def _component_names(base: Path) -> set[str]:
    import json
    return set(json.loads((base / "index.json").read_text(encoding="utf-8"))["files"])


def _iso_names(base: Path) -> set[str]:
    import yaml
    return set(yaml.safe_load((base / "catalogue.yml").read_text(encoding="utf-8")))


RECORDS = {
    "k4w-pins.yml images (pin-images, bundle-import)": (_pins, _pins_names, lambda w, n: f"example.test/w{w}/i{n}:1"),
    "image cache images.json (fetch --images)": (_image_record, _image_record_names, lambda w, n: f"example.test/w{w}/i{n}:1"),
    "image cache layout index.json (fetch --images)": (_layout_index, _layout_names, lambda w, n: f"example.test/w{w}/i{n}:1"),
    "component cache index.json (fetch, pin, bundle-import)": (_component_index, _component_names, lambda w, n: f"c{w}/{n}/f"),
    "iso/catalogue.yml (iso-add)": (_iso_catalogue, _iso_names, lambda w, n: f"w{w}-{n}.iso"),
}


def _run(write, base: Path, writer: int, start) -> None:
    start.wait()
    write(base, writer)


@pytest.mark.parametrize("record", list(RECORDS))
def test_racing_writers_keep_every_entry(tmp_path, record):
    write, read, name = RECORDS[record]
    context = multiprocessing.get_context("fork")
    start = context.Event()
    workers = [context.Process(target=_run, args=(write, tmp_path, w, start)) for w in range(WRITERS)]
    for worker in workers:
        worker.start()
    start.set()   # all at once, to make them race
    for worker in workers:
        worker.join(60)
    assert [w.exitcode for w in workers] == [0] * WRITERS, "a writer failed (a shared temp file renamed away?)"
    assert read(tmp_path) == {name(w, n) for w in range(WRITERS) for n in range(ENTRIES)}
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith((".tmp", ".part", ".lock"))) == []
