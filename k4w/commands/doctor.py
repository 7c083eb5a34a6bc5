"""`invoke doctor`: check the host before a long step, and say how to fix each problem."""

from __future__ import annotations

import os
import platform
import re
import shutil
import socket
import tempfile
import urllib.error
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from k4w.media import iso, iso_images
from k4w.infra import packer_hcl, proc, ui
from k4w.infra.host import FAKE_HYPERV_HOST_ENV, STAGES, Check, _is_windows, _powershell, host_checks  # noqa: F401 (doctor.X, as before)
from k4w.render import packer_http
from k4w.infra import sources
from k4w.model import pins
from k4w.derive.cluster import Cluster
from k4w.model.config import Config
from k4w.infra.errors import K4wError
from k4w.infra.redact import redact
from k4w.infra.tools import INSTALL
from k4w.infra.tools import find as find_tool

# Free space a build needs: a Windows VHDX grows to ~25 GB plus the exported box; Ubuntu ~8 GB.
DISK_GB = {"windows": 45, "linux": 12}
MIN_VAGRANT = (2, 2, 0)  # hyperv provider linked_clone / vm_integration_services

# Vagrant logs in to Windows nodes over WinRM inside TLS with NTLM (vagrant/Vagrantfile: transport :ssl,
# basic_auth_only false), and NTLM hashes the password with MD4, which OpenSSL 3 moved to its legacy
# provider: a Vagrant whose Ruby has no MD4 fails every WinRM command with "Digest initialization
# failed" (hashicorp/vagrant#13076, #13216, #13242). The probe runs where the login runs, in Vagrant's
# own process and Ruby (a Vagrantfile is Ruby that Vagrant loads), and hashes with the NTLM library
# Vagrant's WinRM communicator uses (rubyntlm: Net::NTLM.ntlm_hash), so whatever that Vagrant does to
# load the legacy provider counts. It prints one marker line; the rest of the output is Vagrant's.
NTLM_MARKER = "K4W-NTLM-PROBE:"
NTLM_PROBE = f"""# k4w doctor: can this Vagrant compute the MD4 that an NTLM login to a Windows node needs?
require "openssl"
ossl = (OpenSSL::OPENSSL_LIBRARY_VERSION rescue "unknown OpenSSL")
md4 = begin
  OpenSSL::Digest.new("MD4").hexdigest("k4w")
  "openssl-md4-ok"
rescue StandardError => e
  "openssl-md4-failed #{{e.class}}: #{{e.message.lines.first.to_s.strip}}"
end
ntlm = begin
  require "rubyntlm"
  Net::NTLM.ntlm_hash("k4w")
  "ntlm-ok"
rescue LoadError => e
  "ntlm-missing #{{e.message.lines.first.to_s.strip}}"
rescue StandardError => e
  "ntlm-failed #{{e.class}}: #{{e.message.lines.first.to_s.strip}}"
end
# One line: a message's own line breaks ("Did you mean?") would split it.
$stdout.puts "{NTLM_MARKER} #{{ntlm}} | #{{md4}} | #{{ossl}}".tr("\\n", " ")
$stdout.flush
Vagrant.configure("2") {{ |config| }}
"""
NTLM_FIX = ("install HashiCorp's Vagrant 2.4.0 or newer from its own installer, whose Ruby loads OpenSSL's legacy "
            "provider (hashicorp/vagrant#13178; Windows hosts reported fixed in 2.4.0, #13273). A Vagrant on the "
            "system's Ruby needs that provider enabled for it: OPENSSL_CONF naming an openssl.cnf whose "
            "[provider_sect] activates both default and legacy (hashicorp/vagrant#13076)")


def _version(text: str) -> tuple[int, ...] | None:
    m = re.search(r"(\d+)\.(\d+)\.(\d+)", text)
    return tuple(int(x) for x in m.groups()) if m else None


def _tool_version(cmd: list[str]) -> str:
    try:
        return proc.run(cmd, timeout=30).output.strip()
    except (OSError, K4wError) as exc:
        return str(exc)


def tool_checks(out: Path) -> list[Check]:
    from k4w.infra import packer_cli

    checks = []
    # The build runner's own preflight: packer present and at least 1.9.4 (the HCL2 templates'
    # required_plugins), the plugin versions the templates pin installed, an ISO authoring tool
    # for cd_files. One source of truth for "can this host build".
    templates = []
    for path in sorted(out.glob(packer_hcl.GLOB)):
        try:
            templates.append(packer_hcl.load(path))
        except K4wError:
            continue  # invoke validate names the syntax error; the preflight then assumes the default boxes
    problems = packer_cli.packer_preflight(templates)
    version = packer_cli.packer_version()
    found = f"{packer_cli.packer_path()} {packer_cli.version_str(version)}" if version else "not usable"
    checks.append(Check("packer", not problems, found if not problems else "; ".join(problems), "see the message", ("build",)))
    path = shutil.which("vagrant")
    if not path:
        checks.append(Check("vagrant", False, "not installed", INSTALL["vagrant"], ("cluster",)))
    else:
        text = _tool_version(["vagrant", "--version"])
        ver = _version(text)
        ok = ver is not None and ver >= MIN_VAGRANT
        checks.append(Check("vagrant", ok, f"{path} {text}", f"needs {'.'.join(map(str, MIN_VAGRANT))} or newer: {INSTALL['vagrant']}", ("cluster",)))
        if ok:
            checks.append(vagrant_ntlm_check(path))
    # A build runs every validator before Packer starts, so it needs their tools too.
    for tool in ("packer", "shellcheck", "ruby", "debconf-set-selections"):
        path = find_tool(tool)  # the pinned cache's packer first, as validate runs it
        # Required to validate; a build only says which validators this host cannot run
        # (k4w/bake/gate.py), because a Windows host cannot have debconf-set-selections.
        checks.append(Check(f"{tool} (validation)", bool(path), path or "not installed", INSTALL[tool], ("validate",)))
    return checks


def vagrant_ntlm_check(vagrant: str) -> Check:
    """Whether Vagrant's own Ruby computes the NTLM hash (MD4) of the WinRM login to Windows nodes."""
    name, stages = "vagrant WinRM NTLM (MD4)", ("cluster",)
    with tempfile.TemporaryDirectory(prefix="k4w-doctor-") as folder:
        (Path(folder) / "Vagrantfile").write_text(NTLM_PROBE, encoding="utf-8")
        # VAGRANT_CWD: the probe is the only Vagrantfile Vagrant sees, whatever the user's cwd holds.
        env = {**os.environ, "VAGRANT_CWD": folder, "VAGRANT_CHECKPOINT_DISABLE": "1"}
        env.pop("VAGRANT_VAGRANTFILE", None)
        try:
            # validate loads the Vagrantfile; its verdict on the empty config does not matter here.
            output = proc.run([vagrant, "validate"], cwd=Path(folder), env=env, timeout=180).output
        except (OSError, K4wError) as exc:
            return Check(name, False, f"could not run '{vagrant} validate': {redact(str(exc))}", NTLM_FIX, stages)
    lines = [line for line in output.splitlines() if line.startswith(NTLM_MARKER)]
    if not lines:
        return Check(name, False, f"'{vagrant} validate' did not load k4w's probe Vagrantfile: {proc.tail(redact(output), 3)}",
                     NTLM_FIX, stages)
    ntlm, md4, ossl = (part.strip() for part in (lines[-1].removeprefix(NTLM_MARKER).split("|") + ["", ""])[:3])
    if ntlm == "ntlm-ok":
        return Check(name, True, f"Vagrant's Ruby computes the NTLM hash ({ossl})", stages=stages)
    if ntlm.startswith("ntlm-missing"):
        have_md4 = "with" if md4 == "openssl-md4-ok" else "and without"
        return Check(name, False, f"Vagrant cannot load rubyntlm, the NTLM library of its WinRM communicator, "
                                  f"{have_md4} MD4 in its OpenSSL ({ossl})",
                     "a Vagrant packaged by a distribution leaves WinRM's gems out: 'vagrant plugin install winrm "
                     "winrm-elevated winrm-fs' (hashicorp/vagrant#13076), or " + NTLM_FIX, stages)
    return Check(name, False, f"Vagrant's Ruby cannot compute MD4 for NTLM ({ntlm.removeprefix('ntlm-failed ')}; {ossl}): "
                              f"every WinRM command to a Windows node would fail with 'Digest initialization failed'",
                 NTLM_FIX, stages)


def switch_checks(cfg: Config) -> list[Check]:
    if not _is_windows():
        return []
    checks = []
    for label, name, fix, kind in (
        ("management switch", cfg.hyperv.management_switch, "create it in Hyper-V Manager, or set hyperv.management_switch to an existing switch", None),
        ("cluster switch", cfg.hyperv.cluster_switch, "run: invoke network-up", cfg.hyperv.cluster_switch_type),
    ):
        code, out = _powershell(f"Get-VMSwitch -Name '{name.replace(chr(39), chr(39) * 2)}' -ErrorAction Stop | Select-Object -ExpandProperty SwitchType")
        ok, detail = code == 0, out or f"exit {code}"
        if ok and kind and out.strip() != kind:   # hyperv.cluster_switch_type: Internal (NetNat) or External (routed)
            ok, detail = False, f"{out.strip()}, but hyperv.cluster_switch_type is {kind}"
            fix = f"set hyperv.cluster_switch_type: {out.strip()}, or rename the switch and run: invoke network-up"
        checks.append(Check(f"{label} '{name}'", ok, detail, fix, ("build",) if label == "management switch" else ("cluster",)))
    return checks


def firewall_checks(cluster: Cluster) -> list[Check]:
    """The inbound rule for Packer's HTTP server, when a box's installer fetches from it."""
    if not _is_windows() or not packer_http.uses_http_server(cluster):
        return []
    code, out = _powershell(packer_http.check_command(sources.REPO.host / packer_http.SCRIPT,
                                                      cluster.config.hyperv.management_switch))
    return [Check(f"firewall: Packer HTTP server (TCP {packer_http.port_range()})", code == 0, out or f"exit {code}",
                  packer_http.doctor_fix(code), ("build",))]


def iso_checks(cluster: Cluster) -> list[Check]:
    checks = []
    for box, prof in cluster.profiles.items():
        path = iso.iso_path(prof)
        expected = iso.iso_sha256(prof)
        remote = prof.data.iso.get("url")
        if path.is_file():
            detail = f"{path} ({path.stat().st_size / 2**30:.1f} GiB)"
            ok = expected is not None
            fix = f"invoke iso-add {path}" if not ok else ""
            detail += ", checksum known" if ok else ", checksum NOT in iso/catalogue.yml"
        elif remote and expected:
            ok, detail, fix = True, f"not in iso/, Packer downloads {remote} and verifies its sha256", ""
        else:
            ok, detail, fix = False, f"{path} missing", f"copy your ISO there or run: invoke iso-add PATH --box {box}"
        checks.append(Check(f"ISO for {box}", ok, detail, fix, ("build",)))
        if prof.is_windows and path.is_file():
            checks.append(_image_check(box, prof, path))
    return checks


def _image_check(box: str, prof, path: Path) -> Check:
    """Whether Setup can install the profile's image from this ISO unattended (k4w/media/iso_images.py)."""
    name = f"ISO images for {box}"
    try:
        verdict = iso_images.verify(prof, path)
    except iso_images.ImagesUnavailable as exc:
        fix = ("run invoke doctor in an elevated shell ('Run as administrator')" if _is_windows()
               else "run invoke doctor on the Windows Hyper-V host; every build checks the images there before Packer starts")
        return Check(name, False, f"not checked: {exc}", fix, ("build",))
    except iso_images.ImagesRefused as exc:
        return Check(name, False, str(exc), "set what the message names in the box profile", ("build",))
    return Check(name, True, f"{verdict.summary()} (image list from {verdict.origin})", "", ("build",))


def pin_checks(cluster: Cluster) -> list[Check]:
    checks = []
    for box, prof in cluster.profiles.items():
        missing = pins.unpinned(prof, {})
        commands = [pins.pin_command(box, name, cluster.config_file) for name in missing]
        checks.append(Check(f"checksums pinned for {box}", not missing,
                            f"no checksum for {', '.join(missing)}" if missing else "every download has a checksum",
                            "run on this host: " + "; ".join(commands) if commands else "", ("build",)))
    return checks


def _config_arg(cluster: Cluster) -> str:
    """The ` --config FILE` of a fix command; empty for the default cluster.yml."""
    return f" --config {cluster.config_file}" if cluster.config_file and str(cluster.config_file) != "cluster.yml" else ""


def image_checks(cluster: Cluster, offline: bool) -> list[Check]:
    """The host's image cache, for the boxes whose bake imports their images (downloads.images: cache): each
    image pinned and cached at its pin. Required with --offline (nothing can be pulled), else warnings."""
    from k4w.bake import image_cache
    from k4w.derive import images

    boxes = [box for box, profile in cluster.profiles.items() if images.imported(cluster.config, profile)]
    if not boxes:
        return []
    stages = ("build",) if offline else ()
    root = image_cache.cache_root(cluster)
    record = image_cache.Record(root)
    config_arg = _config_arg(cluster)
    checks = []
    for item in images.needed((box, cluster.profile(box)) for box in boxes):
        entry = record.entry(item) if item.pinned else None
        if not item.pinned:
            detail, fix = "no digest pinned", f"invoke pin-images{config_arg} (on a connected host: then invoke bundle)"
        elif entry:
            detail, fix = f"cached at its pin {item.pinned} ({iso.human_size(entry['size'])})", ""
        else:
            detail, fix = f"not in the image cache at its pin {item.pinned}", \
                f"invoke fetch --images{config_arg}" + (" on a connected host, then invoke bundle / bundle-import" if offline else "")
        checks.append(Check(f"image cache: {item.label}", entry is not None, detail, fix, stages))
    missing = sum(not c.ok for c in checks)
    checks.append(Check("image cache", missing == 0, f"{root}: {len(checks) - missing} of {len(checks)} images cached at their pins",
                        "" if not missing else f"invoke pin-images{config_arg}, or invoke bundle-import on an air-gapped host", stages))
    return checks


def cache_checks(cluster: Cluster, offline: bool = False) -> list[Check]:
    """The host's component cache, offline (no request is made): warnings only, because every
    build fetches what is missing. Sizes come from the manifest, or from a user pin; else unknown."""
    from k4w.bake import cache

    root = cache.cache_dir(cluster.config, cluster.config_file)
    manifest = cache.Manifest(root)
    user_pins = pins.load(cluster.config_file) if cluster.config_file else {}
    try:
        items = cache.plan(cluster)
    except K4wError as exc:
        return [Check("component cache", False, str(exc), "fix the box profiles it names", stages=())]
    checks, to_fetch, unknown = [], 0, 0
    for item in items:
        state = manifest.status(item)
        if item.checksum is None:
            detail, fix = "missing: no checksum to verify it against", "; ".join(item.pin_commands(cluster.config_file))
        elif state == "verified":
            entry = manifest.files[item.relpath]
            detail, fix = f"cached and verified ({iso.human_size(entry['size'])}, {entry['verified_at']})", ""
        else:
            detail = ("cached but changed since it was verified: fetch hashes it again" if state == "changed"
                      else "missing")
            fix = "invoke fetch" + _config_arg(cluster)
        if state != "verified":
            size = next((p.get("size") for p in ((user_pins.get(b) or {}).get(item.component) for b in item.boxes)
                         if p and p.get("url") == item.url and p.get("size")), None)
            if size is None:
                unknown += 1
            else:
                to_fetch += size
                detail += f" ({iso.human_size(size)} from the pin)"
        checks.append(Check(f"cache: {item.label}", state == "verified", f"{detail}: {item.path(root)}", fix,
                            stages=("build",) if offline else ()))
    if checks:
        missing = sum(not c.ok for c in checks)
        unknown_text = f"{unknown} file{'s' if unknown != 1 else ''} of unknown size"
        total = (f"{iso.human_size(to_fetch)} + {unknown_text}" if to_fetch and unknown
                 else unknown_text if unknown else iso.human_size(to_fetch))
        checks.append(Check("component cache", missing == 0,
                            f"{root}: {len(checks) - missing} of {len(checks)} cached and verified"
                            + (f"; still to download: {total}" if missing else ""),
                            "invoke fetch (build-* fetches them too)" if not offline else
                            "invoke fetch on a connected host, then invoke bundle / bundle-import",
                            stages=("build",) if offline else ()))
    return checks


def disk_check(cluster: Cluster, out: Path) -> Check:
    need = sum(DISK_GB["windows" if prof.is_windows else "linux"] for prof in cluster.profiles.values())
    probe = out if out.exists() else out.resolve().parent
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free / 2**30
    return Check("disk space", free >= need, f"{free:.0f} GiB free at {probe}, builds need about {need} GiB",
                 "free space or point --out at a bigger disk", ("build",))


def proxy_checks(cluster: Cluster) -> list[Check]:
    """Can this host reach the resolved model's proxy? The fix names the --config the user gave."""
    config_file = cluster.config_file or "cluster.yml"
    checks = []
    for label, url in (("http", cluster.proxy.http), ("https", cluster.proxy.https)):
        if not url:
            continue
        parts = urlsplit(url)
        try:
            with socket.create_connection((parts.hostname, parts.port), timeout=3):
                ok, detail = True, f"{parts.hostname}:{parts.port} accepts connections"
        except OSError as exc:
            ok, detail = False, f"{parts.hostname}:{parts.port}: {exc}"
        checks.append(Check(f"proxy.{label}", ok, detail, f"check proxy.{label} in {config_file} and that the proxy is reachable from this host", ("build", "cluster")))
    return checks


def out_checks(out: Path) -> list[Check]:
    """doctor reads --out without its lock: a render killed mid-swap shows as a failure, not as
    templates of two renders."""
    from k4w import render
    from k4w.outdir import swap

    record = swap.swap_pending(out)
    if record is None:
        return []
    return [Check("--out", False, swap.pending_swap_message(record), f"invoke render --out {out}")]


# ------------------------------------------------------------------ online: do the profiles' URLs still answer?

# Seconds one URL may take to answer (each request, through the proxy); the URLs are asked in parallel.
URL_TIMEOUT_S = 20
URL_WORKERS = 8


@dataclass(frozen=True)
class Answer:
    url: str
    ok: bool
    detail: str  # "HTTP 200", "HTTP 404", "timed out", ...


def ask(url: str, proxy) -> Answer:
    """HEAD url through the cluster's proxy, exactly as the build's downloads go (k4w.infra.download:
    the proxy of cluster.yml with its credentials, never the host's environment, NO_PROXY honoured);
    a server that refuses HEAD (405, 501) is asked for its first byte instead."""
    from k4w.infra import download

    opener = download.opener(url, proxy)
    for method, extra in (("HEAD", {}), ("GET", {"Range": "bytes=0-0"})):
        request = download.request(url, method=method)
        for key, value in extra.items():
            request.add_header(key, value)  # a Range follows a redirect (GitHub's releases answer with one)
        try:
            with opener.open(request, timeout=URL_TIMEOUT_S) as response:
                return Answer(url, True, f"HTTP {response.status}")
        except urllib.error.HTTPError as exc:
            if method == "HEAD" and exc.code in (405, 501):
                continue
            return Answer(url, False, f"HTTP {exc.code} {exc.reason}")
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            return Answer(url, False, redact(f"no answer: {reason}"))
    return Answer(url, False, "HEAD and GET refused")


def url_checks(cluster: Cluster, asker=ask) -> list[Check]:
    """Online (`invoke doctor --online`): every URL a build downloads from still answers. An ISO
    passes when one of its URLs answers (Packer's iso_urls tries them in order: a superseded point
    release moves from releases to old-releases.ubuntu.com); a local copy in iso/ makes its URLs a
    warning only. Each component URL must answer, as the fetch before every build downloads it."""
    from k4w.bake import cache

    proxy = cluster.proxy
    isos = {box: [u for u in (prof.data.iso.get("url"), prof.data.iso.get("superseded_url")) if u]
            for box, prof in cluster.profiles.items()}
    checks = []
    try:
        items = cache.plan(cluster)
    except K4wError as exc:  # the component cache check names the same problem
        items = []
        checks.append(Check("online: download URLs", False, f"not asked: {exc}", "fix the box profiles it names", ("build",)))
    urls = list(dict.fromkeys([u for found in isos.values() for u in found] + [item.source for item in items]))
    with ThreadPoolExecutor(max_workers=URL_WORKERS) as pool:
        answers = dict(zip(urls, pool.map(lambda u: asker(u, proxy), urls)))
    for box, found in isos.items():
        if not found:
            continue
        prof = cluster.profiles[box]
        local = iso.iso_path(prof).is_file()
        ok = any(answers[u].ok for u in found)
        detail = "; ".join(f"{redact(u)}: {answers[u].detail}" for u in found)
        fix = ("" if ok else "the ISO moved or the proxy refuses it: set iso.url/iso.superseded_url to where it is now "
               f"(with its sha256), or copy it to {iso.iso_path(prof)}")
        checks.append(Check(f"online: ISO URLs for {box}", ok, detail + (" (a local copy exists)" if local else ""),
                            fix, () if local else ("build",)))
    for item in items:
        answer = answers[item.source]
        checks.append(Check(f"online: {item.label} URL", answer.ok, f"{redact(item.source)}: {answer.detail}",
                            "" if answer.ok else f"the download is gone or the proxy refuses it: update components.{item.component}.url "
                            "(and its checksum) in the box profile, or set downloads.mirror", ("build",)))
    return checks


def run(cluster: Cluster, out: Path, online: bool = False, offline: bool = False) -> list[Check]:
    """online: also ask every download URL (url_checks); doctor makes no request otherwise. offline: this host
    cannot download, so every component and every image a bake imports must already be in the caches."""
    cfg = cluster.config
    if cfg.host.provider == "libvirt":   # a Linux host: libvirt's checks, none of Hyper-V's
        from k4w.commands import doctor_libvirt

        host, provider = [], doctor_libvirt.checks(cluster)
    else:
        host, provider = host_checks(), [*switch_checks(cfg), *firewall_checks(cluster)]
    return [*out_checks(out), *host, *tool_checks(out), *provider, *iso_checks(cluster),
            *pin_checks(cluster), *cache_checks(cluster, offline), *image_checks(cluster, offline), disk_check(cluster, out),
            *proxy_checks(cluster),
            *(url_checks(cluster) if online else [])]


def show(checks: list[Check], stage: str) -> int:
    """Print the checks as one table; returns how many of those the stage needs failed."""
    rows, failed = [], 0
    for chk in checks:
        required = chk.required_for(stage)
        mark = "ok" if chk.ok else ("FAIL" if required else "warn")
        failed += (not chk.ok) and required
        rows.append([mark, chk.name, chk.detail, "" if chk.ok else chk.fix])
    ui.table(f"doctor (stage: {stage})", ["", "check", "found", "fix"], rows)
    return failed
