"""Render every artifact from one validated config, atomically.

Templates are found by convention (docs/internals.md): a new template file is rendered
without touching this module. Nothing is written until every template rendered; the render is
then staged beside the managed folders of --out and committed in one atomic step (see
write_atomically), so bad input, a crash or Ctrl-C leaves --out wholly old or wholly new.
"""

from __future__ import annotations

import json
import os
import secrets as _secrets
import shutil
import signal
import string
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import jinja2

from k4w.media import build_media, iso
from k4w.derive import identities, node_marks, winrm_scope
from k4w.model import kubeadm_timeouts, profiles
from k4w.infra import files as outfiles
from k4w.outdir import lock as outlock, private
from k4w.infra import packer_hcl, pinned_tools, ui
from k4w.render import packer_http
from k4w.derive.cluster import Cluster
from k4w.derive.step_env import secret_env_name, step_env
from k4w.infra.errors import K4wError
from k4w.infra.redact import register_secret
from . import escape, hostprocess, owned

# The folders of --out that render owns. boxes/, logs/, secrets/ and state survive a render.
MANAGED = ("packer", "http", "vagrant", "manifests", "kubeadm", "nodes")
# The rendered folders whose files may hold a credential, so every file in them is owner-only
# (k4w.outdir.private): preseed.cfg and user-data the apt proxy, Autounattend.xml the Administrator
# password (base64, which is no protection). The Packer templates read their secrets from the
# environment and hold none; they stay private should a template ever inline one.
PRIVATE = ("packer", "http")
# The commit record of a render swap (write_atomically); not named .render-* so that the sweep of
# leftover staging folders never takes it for one.
SWAP_RECORD = ".swap-commit.json"
# Staging and trash folders of interrupted renders, and a commit record's own temp file.
LEFTOVERS = (".render-*", ".old-*", f".{SWAP_RECORD}.*.tmp")  # outfiles.write_file's temp name
# Stands in for per-build secrets when the up-to-date stamp is computed.
PLACEHOLDER_SECRETS = {"admin_password": "k4w-stamp-placeholder", "box_user_password": "k4w-stamp-placeholder"}


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
    env.globals["secret_env"] = secret_env_name
    env.globals["has_template"] = lambda name: _has_template(env, name)
    return env


def _has_template(env: jinja2.Environment, name: str) -> bool:
    """Whether a template exists: a template that includes the file a profile names (an era's
    variant) checks it first, so a wrong name fails naming the profile key, not a loader error."""
    try:
        env.loader.get_source(env, name)
    except jinja2.TemplateNotFound:
        return False
    return True


def _fail(message: str) -> None:
    """Templates call << fail("why") >> to refuse a profile/config they cannot render."""
    raise K4wError(message)


def _paths(cluster: Cluster, out: Path, box: str | None) -> dict:
    """The paths a Packer template names, each written from the template's own folder
    (packer_hcl.PATH_ROOT: Packer's path.root, OUT/packer/), never from the checkout or --out as
    absolute paths, so the rendered folder can be moved or handed on and still validates and builds
    where it lands. The checkout's guest/ and vagrant/ files a template names ship beside it, in
    OUT/packer/guest/ and OUT/packer/vagrant/ (shipped_sources)."""
    repo = cluster.sources
    base = out / packer_hcl.rel_path("x").rsplit("/", 1)[0]

    def from_root(path: Path) -> str:
        # A path that shares no folder with --out but the drive's root (an ISO folder when --out
        # is elsewhere) stays absolute: a climb to the root would name the same folders, less legibly.
        if Path(os.path.commonpath([path, base])) == Path(path.anchor):
            return str(path)
        return packer_hcl.PATH_ROOT + "/" + Path(os.path.relpath(path, base)).as_posix()

    paths = {
        "out": from_root(out),
        "guest": packer_hcl.PATH_ROOT + "/" + SHIPPED["guest"],
        "vagrant": packer_hcl.PATH_ROOT + "/" + SHIPPED["vagrant"],
        "boxes": from_root(out / "boxes"),
        "logs": from_root(out / "logs"),
        "http": from_root(out / "http" / box) if box else None,
        "http_served": None,
        "iso": None,
        "iso_sha256": None,
    }
    if box:
        prof = cluster.profile(box)
        paths["http_served"] = from_root(build_media.served_folder(out, prof))
        # The ISO does not ship (gigabytes, and a Windows ISO may not be handed on): named by the
        # way from the template to iso/, which holds for the default --out build inside the checkout.
        paths["iso"] = from_root(iso.iso_path(prof))
        paths["iso_sha256"] = iso.iso_sha256(prof)
    return paths


# The checkout's folders whose files a Packer template names, by the folder of OUT/packer/ they are
# copied to, so the template names them ${path.root}/guest/..., ${path.root}/vagrant/....
SHIPPED = {"guest": "guest", "vagrant": "vagrant"}


def shipped_sources(template_text: str, name: str, repo) -> dict[str, str]:
    """The files of the checkout a rendered Packer template names (folders whole), as rendered
    files under packer/: what `packer validate` and `packer build` read besides the template."""
    files: dict[str, str] = {}
    parsed = packer_hcl.parse(template_text, name)
    prefix = packer_hcl.PATH_ROOT_EXPR + "/"
    for text in _strings([parsed["builders"], parsed["provisioners"], parsed["post-processors"]]):
        if not text.startswith(prefix):
            continue
        rel = text[len(prefix):]
        top = rel.split("/", 1)[0]
        if top not in SHIPPED.values():
            continue
        source = repo.root / rel.rstrip("/")
        if source.is_dir():
            found = sorted(p for p in source.rglob("*") if p.is_file())
        elif source.is_file():
            found = [source]
        else:
            raise K4wError(f"{name} names {rel}, which is not in the checkout ({source})")
        for path in found:
            files[f"packer/{path.relative_to(repo.root).as_posix()}"] = path.read_bytes().decode("utf-8")
    return files


def _strings(value) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _verbatim(rel: str) -> bool:
    """A shipped copy of a checkout file, written byte for byte (no newline translation on a
    Windows host: a bash script with CRLF line ends fails in the guest)."""
    parts = rel.split("/")
    return len(parts) > 2 and parts[0] == "packer" and parts[1] in SHIPPED.values()


def secrets_path(out: Path, box: str) -> Path:
    return out / "secrets" / f"{box}.json"


# The Windows box user's ("vagrant") password: random, made once per --out folder and kept, unlike
# the Administrator's, which each build rotates. A rotation would lock Vagrant out of every VM made
# from an earlier build of the box (they keep the password they were built with), and the
# Administrator's needs none: it is disabled when its build ends. Vagrant reads it from this file
# (vagrant/Vagrantfile, through cluster.json's box_user_secrets): it is never on a command line
# nor in the box's own Vagrantfile.
BOX_USER_SECRETS = "box-user.json"


def box_user_secrets_path(out: Path) -> Path:
    return Path(out) / "secrets" / BOX_USER_SECRETS


def load_box_user_password(out: Path) -> str:
    out = Path(out)
    path = box_user_secrets_path(out)
    outfiles.refuse_links(path, out)
    password = None
    if path.exists():
        try:
            password = json.loads(path.read_text(encoding="utf-8")).get("password")
        except (OSError, UnicodeDecodeError, ValueError, AttributeError):
            password = None
        if not isinstance(password, str) or not password:
            # Replacing it would lock Vagrant out of the VMs made with the old one: say so, stop.
            raise K4wError(f"{path} holds no readable box user password; restore it, or delete it and rebuild the "
                           "Windows boxes and their VMs (invoke cluster-down, build-windows, cluster-up)")
    else:
        password = _new_secrets()["admin_password"]
    # Written even when it exists, like load_secrets: a file left readable by others is tightened.
    private.write_private(path, json.dumps({"password": password}), within=out)
    register_secret(password)
    return password


def load_secrets(out: Path, box: str) -> dict:
    """Per-build secrets of a box, created on first use and kept (0600) until a build rotates them.

    An unreadable, empty or corrupt file (a disk that filled up mid-write under an older k4w)
    is treated as absent, with a warning naming it: a new password is made, as a build would.
    """
    out = Path(out)
    path = secrets_path(out, box)
    outfiles.refuse_links(path, out)
    data = _read_secrets(path) if path.exists() else None
    if data is None:
        data = _new_secrets()
    # Written even when it exists: a file left readable by others (mode 0644, an inherited
    # Windows ACL) is tightened by every render (k4w.outdir.private).
    private.write_private(path, json.dumps(data), within=out)
    for value in data.values():
        register_secret(value)
    return data


def _read_secrets(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        why = getattr(exc, "strerror", None) or type(exc).__name__
        ui.say(f"warning: {path} is unreadable ({why}); it is replaced by new secrets", style="yellow")
        return None
    if not isinstance(data, dict) or not isinstance(data.get("admin_password"), str) or not data["admin_password"]:
        ui.say(f"warning: {path} holds no admin_password; it is replaced by new secrets", style="yellow")
        return None
    return data


def _new_secrets() -> dict:
    alphabet = string.ascii_letters + string.digits
    # Windows complexity rules want upper, lower and digit; 24 random chars plus a fixed tail gives all three.
    return {"admin_password": "".join(_secrets.choice(alphabet) for _ in range(24)) + "aA1"}


def rotate_secrets(out: Path, box: str) -> dict:
    """New secrets for a box, replacing the old file in one rename (never a moment without one)."""
    out = Path(out)
    data = _new_secrets()
    private.write_private(secrets_path(out, box), json.dumps(data), within=out)
    for value in data.values():
        register_secret(value)
    return data


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
        # Where Vagrant reads the Windows box user's password (never in this file itself).
        "box_user_secrets": str(box_user_secrets_path(out)),
        "machines": machines,
    }


def http_templates(templates: Path, prof: profiles.Profile) -> list[Path]:
    """The templates rendered to OUT/http/<box>/ for one box (docs/internals.md): those of its
    family for every box, plus those of its installer kind only, so a box never carries the
    answer files of an installer it does not run."""
    family = templates / "http" / prof.os_family
    found = sorted(family.glob("*.j2"))
    kind = prof.installer_kind
    if kind is not None:
        folder = family / kind
        if not folder.is_dir() or not any(folder.glob("*.j2")):
            known = ", ".join(sorted(d.name for d in family.iterdir() if d.is_dir())) if family.is_dir() else ""
            raise K4wError(f"{prof.path}: installer.kind {kind!r} has no templates in templates/http/{prof.os_family}/{kind}/ "
                           f"(known kinds: {known or 'none'})")
        found += sorted(folder.glob("*.j2"))
    return found


# A cluster k4w did not make (cluster.existing) has its own CNI: k4w neither renders nor applies Flannel's
# manifest there (k4w/cluster/existing.py reads the cluster's Flannel config instead).
NOT_FOR_EXISTING = ("kube-flannel.yaml",)


def render_files(cluster: Cluster, out: Path, secrets_for=None) -> dict[str, str]:
    """Render every artifact in memory: {path relative to out: text}. Writes nothing.

    secrets_for(box) gives a box's secrets; None means placeholders (for stamps, dry runs and tests).
    """
    out = Path(out).resolve()
    cfg = cluster.config
    templates = cluster.sources.templates
    env = _environment(templates)
    base = {"cfg": cfg, "net": cluster.network, "proxy": cluster.proxy, "kube": cluster.kube,
            "windows_demo_image": cluster.windows_demo_image,
            "windows_nanoserver_image": cluster.windows_nanoserver_image,
            "kubeadm_timeouts": kubeadm_timeouts.rendered(cfg.cluster.ready_timeout),
            "marks": node_marks,
            "windows_identities": {i.component: i for i in identities.WINDOWS_COMPONENTS},
            "winrm_remote_scope": winrm_scope.remote_scope(cfg.hyperv.management_switch),
            "packer_http": {"port_min": packer_http.PORT_MIN, "port_max": packer_http.PORT_MAX},
            "packer_plugins": pinned_tools.packer_pins()}
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
            "step_env": step_env(prof, cluster),
        }
        extra["packer_env"] = packer_hcl.environment_locals(extra["step_env"].environment_vars)
        packer_template = templates / "packer" / f"{prof.os_family}{packer_hcl.SUFFIX}.j2"
        if not packer_template.is_file():
            raise K4wError(f"box {box_name}: no Packer template templates/packer/{prof.os_family}{packer_hcl.SUFFIX}.j2 "
                           f"for os_family '{prof.os_family}'")
        # Found first: an unknown installer kind is reported as such, not as a missing Packer partial.
        installer_templates = http_templates(templates, prof)
        emit(packer_template, packer_hcl.rel_path(box_name), **extra)
        files.update(shipped_sources(files[packer_hcl.rel_path(box_name)], packer_hcl.rel_path(box_name), cluster.sources))
        for tpl in installer_templates:
            emit(tpl, f"http/{box_name}/{tpl.stem}", **extra)

    for tpl in sorted((templates / "manifests").glob("*.yaml.j2")):
        if tpl.name == identities.SERVICE_IDENTITIES_TEMPLATE and not identities.service_identities_needed(
                [cluster.profile(n.box) for n in cfg.nodes]):
            continue
        if not (cfg.joins_existing and tpl.stem in NOT_FOR_EXISTING):
            emit(tpl, f"manifests/{tpl.stem}")
    # The patches change kubeadm's own DaemonSets, which k4w leaves alone in a cluster it did not make.
    for tpl in [] if cfg.joins_existing else sorted((templates / "manifests" / "patches").glob("*.j2")):
        emit(tpl, f"manifests/patches/{tpl.stem}")
    # A Windows node recipe's own manifests (templates/manifests/windows-<recipe>/, e.g. the containerd
    # era's HostProcess DaemonSets), only when a node uses that recipe; an existing cluster gets them
    # too (k4w/cluster/existing.py applies them as the objects its Windows workers need).
    for folder, recipe_profs in hostprocess.recipe_profiles(cluster).items():
        recipe_box = profiles.Attr(recipe_profs[0].data)
        for tpl in sorted((templates / "manifests" / folder).glob("*.yaml.j2")):
            emit(tpl, f"manifests/{folder}/{tpl.stem}", box=recipe_box,
                 hostprocess=hostprocess.context(cluster, folder, recipe_profs, cluster.sources.guest))
    # An existing cluster was initialised by its own tool: no kubeadm init config (k4w/cluster/existing.py).
    for tpl in [] if cfg.joins_existing else sorted((templates / "kubeadm").glob("*.j2")):
        emit(tpl, f"kubeadm/{tpl.stem}")
    for node in cfg.nodes:
        prof = cluster.profile(node.box)
        recipe = templates / "nodes" / prof.node_templates
        if prof.node_recipe and not recipe.is_dir():
            raise K4wError(f"box {node.box}: no node recipe templates/nodes/{prof.node_templates}/ "
                           f"(node_recipe {prof.node_recipe!r} in {prof.path.name})")
        for tpl in sorted(recipe.glob("*.j2")):
            box = profiles.Attr(prof.data)
            box["name"] = node.box
            emit(tpl, f"nodes/{node.name}/{tpl.stem}", node=node, box=box, paths=_paths(cluster, out, node.box))

    files["vagrant/cluster.json"] = json.dumps(cluster_json(cluster, out), indent=2) + "\n"
    return files


def write_atomically(files: dict[str, str], out: Path) -> None:
    """Stage the render in OUT/.render-XXXX/, commit it, then move the managed folders in.

    Windows cannot rename a folder over a non-empty one, and folder symlinks need a privilege
    there, so the switch cannot be one rename of the folders themselves. Its commit is one
    atomic rename instead: SWAP_RECORD names the staged render. Before it, --out is untouched (a
    failure, Ctrl-C or SIGTERM only leaves a staging folder, swept by the next render); from it
    on, Ctrl-C and SIGTERM wait until the swap is finished (then the command stops, exit 130 or 143). A
    process killed outright leaves SWAP_RECORD: every k4w task that holds the --out lock finishes
    the swap before it reads, and those that read without the lock (doctor, dry runs) report it
    (swap_pending). Only folders a render made are replaced (owned.check).
    """
    out = Path(out).resolve()
    with outlock.hold(out):
        outfiles.refuse_links(out / SWAP_RECORD, out)
        finish_swap(out)
        owned.check(out, MANAGED)
        staging = Path(tempfile.mkdtemp(prefix=".render-", dir=out))
        committed = False
        try:
            _write_tree(files, staging, durable=True)
            outfiles.write_file(staging / owned.MANIFEST, owned.manifest_text(files, MANAGED), within=staging)
            trash = out / (".old-" + staging.name.removeprefix(".render-"))
            fresh = sorted(name for name in MANAGED if (staging / name).exists())
            record = {"staging": staging.name, "trash": trash.name, "fresh": fresh}
            with _interrupts_deferred():
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
def _interrupts_deferred() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM until the block is done, then hand the first one to the handler it
    would have reached (k4w.infra.signals in a task: KeyboardInterrupt, exit 130 or 143): a committed swap
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
            if (staging / owned.MANIFEST).is_file():
                os.replace(staging / owned.MANIFEST, out / owned.MANIFEST)
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


def _write_tree(files: dict[str, str], folder: Path, durable: bool = False) -> None:
    """Write files into a fresh folder; those under PRIVATE are restricted to this user before
    their text is written (k4w.outdir.private). durable: fsync each file, so that a committed render
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


def render(cluster: Cluster, out: Path) -> dict[str, str]:
    """Render with real per-build secrets and write. Returns the files written."""
    out = Path(out).resolve()

    def secrets_for(box: str) -> dict:
        if not cluster.profile(box).is_windows:
            return PLACEHOLDER_SECRETS
        return {**load_secrets(out, box), "box_user_password": load_box_user_password(out)}

    if out.is_dir():
        with outlock.hold(out):
            finish_swap(out)
            owned.check(out, MANAGED)  # before secrets/ is written: a refused --out gets nothing
    files = render_files(cluster, out, secrets_for=secrets_for)
    write_atomically(files, out)
    return files
