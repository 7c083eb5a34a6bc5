"""The rendered folder can be moved or handed on: nothing in it names the checkout or --out by an
absolute path, and a template copied elsewhere with its folder still passes the real
`packer validate` (issue 34 item 5).

Packer takes a relative path from the directory it runs in, so the templates name every file from
their own folder, ${path.root} (k4w.infra.packer_hcl.PATH_ROOT), and the checkout's guest/ and vagrant/
files they name ship beside them in OUT/packer/ (k4w.render.shipped_sources).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from k4w import render
from k4w.infra import packer_hcl
from k4w.derive.cluster import Cluster
from tests.helpers import ROOT, packer_validate

CONFIGS = [ROOT / "cluster.yml", *sorted((ROOT / "examples").glob("cluster-modern*.yml"))]
# Not read by Packer: Vagrant and cluster-up read OUT/boxes/ and OUT/secrets/ by the absolute paths
# in it (k4w/cluster/machines.py, vagrant/Vagrantfile). Asserted below to still hold, so the entry
# goes once it no longer does.
NAMES_OUT = {"vagrant/cluster.json"}


def _cluster(path: Path) -> Cluster:
    return Cluster.load(path)


def _naming(files: dict[str, str], path: Path) -> list[str]:
    return sorted(rel for rel, text in files.items() if str(path) in text or path.as_posix() in text)


@pytest.mark.parametrize("config_file", CONFIGS, ids=lambda p: p.name)
def test_no_rendered_artifact_names_the_checkout_or_the_out_folder(config_file, tmp_path):
    # The default layout (--out build inside the checkout), rendered in memory: nothing written.
    out = ROOT / "build-k4w-portable-test"
    files = render.render_files(_cluster(config_file), out)
    assert _naming(files, ROOT) == sorted(NAMES_OUT)
    assert _naming(files, out) == sorted(NAMES_OUT)
    # --out elsewhere: the ISO, which never ships, may be named in the checkout; --out never is.
    elsewhere = tmp_path / "out"
    assert _naming(render.render_files(_cluster(config_file), elsewhere), elsewhere) == sorted(NAMES_OUT)


@pytest.mark.parametrize("config_file", CONFIGS, ids=lambda p: p.name)
def test_every_shipped_file_is_the_checkouts_and_every_named_one_ships(config_file):
    out = ROOT / "build-k4w-portable-test"
    files = render.render_files(_cluster(config_file), out)
    shipped = {rel for rel in files if rel.startswith("packer/") and not rel.endswith(packer_hcl.SUFFIX)}
    assert shipped
    for rel in shipped:
        assert files[rel].encode("utf-8") == (ROOT / rel.removeprefix("packer/")).read_bytes(), rel
    for template in (rel for rel in files if rel.endswith(packer_hcl.SUFFIX)):
        parsed = packer_hcl.parse(files[template], template, root=out / "packer")
        for path in _paths(parsed):
            rel = Path(path).relative_to(out).as_posix()
            if rel.startswith("packer/"):
                assert rel in files or any(f.startswith(rel.rstrip("/") + "/") for f in files), (template, rel)


def _paths(value) -> list[str]:
    if isinstance(value, str):
        return [value] if value.startswith("/") and "build-k4w-portable-test" in value else []
    if isinstance(value, dict):
        return [p for item in value.values() for p in _paths(item)]
    if isinstance(value, list):
        return [p for item in value for p in _paths(item)]
    return []


def write_rendered(files: dict[str, str], out: Path) -> None:
    """The render's files as render.write_atomically leaves them (without the swap's bookkeeping)."""
    for rel, text in files.items():
        target = out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(text.encode("utf-8"))


@pytest.mark.tools
@pytest.mark.parametrize("config_file", CONFIGS, ids=lambda p: p.name)
def test_a_rendered_folder_copied_elsewhere_still_validates(config_file, tmp_path):
    built = tmp_path / "checkout" / "build"
    files = render.render_files(_cluster(config_file), built)
    write_rendered(files, built)
    moved = tmp_path / "colleague" / "k4w-build"
    shutil.copytree(built, moved)
    shutil.rmtree(built)
    for template in sorted(moved.glob("packer/*" + packer_hcl.SUFFIX)):
        # From another directory than the folder's, by the template's own path, as a user would.
        res = packer_validate(template, env={"K4W_ADMIN_PASSWORD": "validate-only"}, cwd=tmp_path)
        assert res.returncode == 0, f"{template.name}: {res.stdout}{res.stderr}"
