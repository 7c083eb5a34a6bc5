"""Render every artifact from one validated config, atomically.

Templates are found by convention (docs/internals.md): a new template file is rendered
without touching this module. Nothing is written until every template rendered, and the
managed folders of --out are then swapped in, so bad input leaves --out as it was.
"""

from __future__ import annotations

import json
import os
import secrets as _secrets
import shutil
import string
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import jinja2

from .. import iso, packer_http, profiles
from ..cluster_model import Cluster
from ..derive_steps import step_env
from ..errors import K4wError
from ..redact import register_secret
from . import escape

# The folders of --out that render owns. boxes/, logs/, secrets/ and state survive a render.
MANAGED = ("packer", "http", "vagrant", "manifests", "kubeadm", "nodes")
# Stands in for per-build secrets when the up-to-date stamp is computed.
PLACEHOLDER_SECRETS = {"admin_password": "k4w-stamp-placeholder"}


def _environment(templates: Path) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates)),
        # Packer ({{ .HTTPIP }}) and Go templates use {{ }}; ours must not collide.
        variable_start_string="<<",
        variable_end_string=">>",
        block_start_string="<%",
        block_end_string="%>",
        comment_start_string="<#",
        comment_end_string="#>",
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters.update(escape.FILTERS)
    env.globals["fail"] = _fail
    return env


def _fail(message: str) -> None:
    """Templates call << fail("why") >> to refuse a profile/config they cannot render."""
    raise K4wError(message)


def _paths(cluster: Cluster, out: Path, box: str | None) -> dict:
    repo = cluster.sources
    paths = {
        "root": str(repo.root),
        "out": str(out),
        "guest": str(repo.guest),
        "vagrant": str(repo.vagrant),
        "boxes": str(out / "boxes"),
        "logs": str(out / "logs"),
        "http": str(out / "http" / box) if box else None,
        "iso": None,
        "iso_sha256": None,
    }
    if box:
        prof = cluster.profile(box)
        paths["iso"] = str(iso.iso_path(prof))
        paths["iso_sha256"] = iso.iso_sha256(prof)
    return paths


def secrets_path(out: Path, box: str) -> Path:
    return out / "secrets" / f"{box}.json"


def load_secrets(out: Path, box: str) -> dict:
    """Per-build secrets of a box, created on first use and kept (0600) until a build rotates them."""
    path = secrets_path(out, box)
    if path.is_file():
        data = json.loads(path.read_text())
    else:
        alphabet = string.ascii_letters + string.digits
        # Windows complexity rules want upper, lower and digit; 24 random chars plus a fixed tail gives all three.
        data = {"admin_password": "".join(_secrets.choice(alphabet) for _ in range(24)) + "aA1"}
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh)
    for value in data.values():
        register_secret(value)
    return data


def rotate_secrets(out: Path, box: str) -> dict:
    secrets_path(out, box).unlink(missing_ok=True)
    return load_secrets(out, box)


def cluster_json(cluster: Cluster, out: Path) -> dict:
    """What the static vagrant/Vagrantfile reads. Plain data, no Ruby is generated."""
    cfg, net = cluster.config, cluster.network
    machines = []
    for node in cfg.nodes:
        prof = cluster.profile(node.box)
        machines.append(
            {
                "name": node.name,
                "vmname": f"{cfg.cluster.name}-{node.name}",
                "role": node.role,
                "box": node.box,
                "box_catalogue": str(out / "boxes" / f"{node.box}.json"),
                "os": prof.data.node_os,
                "ip": str(node.ip),
                "cpus": node.cpus,
                "memory": node.memory,
            }
        )
    return {
        "cluster": cfg.cluster.name,
        "management_switch": cfg.hyperv.management_switch,
        "cluster_switch": cfg.hyperv.cluster_switch,
        "node_cidr": net.node_cidr,
        "prefix_length": net.node_prefixlen,
        "gateway": net.gateway,
        "dns_ip": net.dns_ip,
        "machines": machines,
    }


def render_files(cluster: Cluster, out: Path, secrets_for=None) -> dict[str, str]:
    """Render every artifact in memory: {path relative to out: text}. Writes nothing.

    secrets_for(box) gives a box's secrets; None means placeholders (for stamps, dry runs and tests).
    """
    out = Path(out).resolve()
    cfg = cluster.config
    templates = cluster.sources.templates
    env = _environment(templates)
    base = {"cfg": cfg, "net": cluster.network, "proxy": cluster.proxy, "kube": cluster.kube,
            "packer_http": {"port_min": packer_http.PORT_MIN, "port_max": packer_http.PORT_MAX}}
    files: dict[str, str] = {}

    def emit(template: Path, target: str, **extra) -> None:
        rel = template.relative_to(templates).as_posix()
        context = {"box": None, "node": None, "paths": _paths(cluster, out, None), "secrets": PLACEHOLDER_SECRETS}
        context.update(base)
        context.update(extra)
        try:
            files[target] = env.get_template(rel).render(**context)
        except K4wError as exc:
            raise K4wError(f"template {rel}: {exc}") from exc
        except jinja2.TemplateError as exc:
            line = getattr(exc, "lineno", None)
            raise K4wError(f"template {rel}{f' line {line}' if line else ''}: {exc}") from exc

    for box_name, prof in cluster.profiles.items():
        box = profiles.Attr(prof.data)
        box["name"] = box_name
        extra = {
            "box": box,
            "paths": _paths(cluster, out, box_name),
            "secrets": secrets_for(box_name) if secrets_for else PLACEHOLDER_SECRETS,
            "step_env": step_env(prof, cfg),
        }
        packer_template = templates / "packer" / f"{prof.os_family}.json.j2"
        if not packer_template.is_file():
            raise K4wError(f"box {box_name}: no Packer template templates/packer/{prof.os_family}.json.j2 for os_family '{prof.os_family}'")
        emit(packer_template, f"packer/{box_name}.json", **extra)
        for tpl in sorted((templates / "http" / prof.os_family).glob("*.j2")):
            emit(tpl, f"http/{box_name}/{tpl.stem}", **extra)

    for tpl in sorted((templates / "manifests").glob("*.yaml.j2")):
        emit(tpl, f"manifests/{tpl.stem}")
    for tpl in sorted((templates / "manifests" / "patches").glob("*.j2")):
        emit(tpl, f"manifests/patches/{tpl.stem}")
    for tpl in sorted((templates / "kubeadm").glob("*.j2")):
        emit(tpl, f"kubeadm/{tpl.stem}")
    for node in cfg.nodes:
        prof = cluster.profile(node.box)
        for tpl in sorted((templates / "nodes" / prof.os_family).glob("*.j2")):
            box = profiles.Attr(prof.data)
            box["name"] = node.box
            emit(tpl, f"nodes/{node.name}/{tpl.stem}", node=node, box=box, paths=_paths(cluster, out, node.box))

    files["vagrant/cluster.json"] = json.dumps(cluster_json(cluster, out), indent=2) + "\n"
    return files


def write_atomically(files: dict[str, str], out: Path) -> None:
    """Write into a sibling temp folder, then swap each managed folder in by rename."""
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".render-", dir=out))
    try:
        _write_tree(files, staging)
        trash = Path(tempfile.mkdtemp(prefix=".old-", dir=out))
        for name in MANAGED:
            current, fresh = out / name, staging / name
            if current.exists():
                current.rename(trash / name)
            if fresh.exists():
                fresh.rename(current)
        shutil.rmtree(trash, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


@contextmanager
def scratch_copy(files: dict[str, str]) -> Iterator[Path]:
    """An in-memory render as a private temporary folder, deleted afterwards: for a dry run's
    readers that only take a folder, so that nothing is written under --out."""
    with tempfile.TemporaryDirectory(prefix="k4w-dry-run-") as folder:
        _write_tree(files, Path(folder))
        yield Path(folder)


def _write_tree(files: dict[str, str], folder: Path) -> None:
    for rel, text in files.items():
        target = folder / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")


def render(cluster: Cluster, out: Path) -> dict[str, str]:
    """Render with real per-build secrets and write. Returns the files written."""
    out = Path(out).resolve()

    def secrets_for(box: str) -> dict:
        return load_secrets(out, box) if cluster.profile(box).is_windows else PLACEHOLDER_SECRETS

    files = render_files(cluster, out, secrets_for=secrets_for)
    write_atomically(files, out)
    return files
