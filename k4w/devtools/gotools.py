"""Build the pinned upstream tools of tools/lock.yml from the Go module proxy, once per name and version.

Run by scripts/build-tools (and so by scripts/setup.sh). Each tool is built in a writable copy of its
module, so that the module's own go.mod (its replace directives, its go line) applies, with
GOTOOLCHAIN=local (the machine's Go; no toolchain is fetched behind our back) and GOWORK=off (a module
zip may carry a go.work that names folders it does not hold). A replace that points at a folder the
module zip leaves out (Kubernetes' ./staging, etcd's ../api) is pointed at the published module of the
same release instead (`published_replaces`). The result goes to a temporary folder that is renamed into
place only when complete, with build.json last, so an interrupted build is never taken as done.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

from k4w.infra import filelock, pinned_tools

GROUPS = ("ci", "cluster")
# The lock entry's fields that decide a build: build.json records them, and a cached build whose
# record differs in any of them is built again.
RECORDED_KEYS = ("module", "version", "packages", "ldflags", "binary", "tags", "extra_tags", "c_source", "drop_imports")


class BuildError(Exception):
    pass


def _say(message: str) -> None:
    print(f"build-tools: {message}", flush=True)


def go_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(GOTOOLCHAIN="local", GOWORK="off", GOFLAGS="-mod=mod -buildvcs=false")
    return env


def _go(args: list[str], cwd: Path | None = None, env: dict | None = None) -> str:
    go = shutil.which("go")
    if not go:
        raise BuildError("go is not installed: the pinned tools are built with Go 1.26 (https://go.dev/doc/install)")
    proc = subprocess.run([go, *args], cwd=cwd, env=env or go_env(), capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"go {' '.join(args[:3])}... in {cwd or '.'} failed (exit {proc.returncode}):\n"
                         f"{proc.stderr.strip()[-4000:]}")
    return proc.stdout


def download(module: str, version: str) -> Path:
    """The module's extracted (read-only) folder in the Go module cache."""
    info = json.loads(_go(["mod", "download", "-json", f"{module}@{version}"]))
    if info.get("Error") or not info.get("Dir"):
        raise BuildError(f"{module}@{version}: the Go module proxy did not serve it: {info.get('Error', 'no Dir')}")
    return Path(info["Dir"])


def writable_copy(source: Path, dest: Path) -> None:
    shutil.copytree(source, dest, symlinks=True)
    for folder, dirs, files in os.walk(dest):
        for name in dirs + files:
            path = Path(folder) / name
            if not path.is_symlink():
                path.chmod(path.stat().st_mode | 0o200)
    Path(dest).chmod(0o755)


def fix_replaces(workdir: Path, published: str | None, label: str = "") -> list[str]:
    """Point every local replace whose folder the module zip lacks at its published module; return the edits."""
    mod = json.loads(_go(["mod", "edit", "-json"], cwd=workdir))
    required = {r["Path"] for r in mod.get("Require") or []}
    edits = []
    for rep in mod.get("Replace") or []:
        old, new = rep["Old"]["Path"], rep["New"]
        if new.get("Version") or (workdir / new["Path"] / "go.mod").is_file():
            continue  # a module replace, or a local folder that is there: the module's own choice applies
        if old not in required:
            # e.g. etcd's `go.etcd.io/etcd => ./FORBIDDEN_DEPENDENCY`, a guard for a module never required
            _go(["mod", "edit", f"-dropreplace={old}"], cwd=workdir)
            edits.append(f"dropped replace {old} => {new['Path']} (not required)")
            continue
        if not published:
            raise BuildError(f"{label or workdir.name}: replace {old} => {new['Path']} names a folder the module zip lacks; "
                             "set published_replaces in tools/lock.yml")
        _go(["mod", "edit", f"-replace={old}={old}@{published}"], cwd=workdir)
        edits.append(f"{old} => {old}@{published}")
    return edits


def _kubernetes_ldflags(version: str) -> str:
    """hack/lib/version.sh's kube::version::ldflags for a release tag: both version packages get it."""
    major, minor = version.lstrip("v").split(".")[:2]
    flags = []
    for pkg in ("k8s.io/client-go/pkg/version", "k8s.io/component-base/version"):
        flags += [f"-X {pkg}.gitVersion={version}", f"-X {pkg}.gitMajor={major}", f"-X {pkg}.gitMinor={minor}",
                  f"-X {pkg}.gitTreeState=clean"]
    return " ".join(flags)


def ldflags(entry: dict) -> str:
    extra = entry.get("ldflags") or ""
    if extra == "kubernetes":
        extra = _kubernetes_ldflags(entry["version"])
    return " ".join(["-s -w", extra.replace("{version}", entry["version"])]).strip()


def packages(entry: dict, workdir: Path) -> list[str]:
    excluded = {os.path.normpath(p) for p in entry.get("exclude") or []}
    found = []
    for pattern in entry["packages"]:
        if "*" not in pattern:
            found.append(pattern)
            continue
        for path in sorted(glob.glob(str(workdir / pattern))):
            rel = "./" + os.path.relpath(path, workdir)
            if Path(path).is_dir() and os.path.normpath(rel) not in excluded:
                found.append(rel)
    return found


def drop_imports(workdir: Path, drops: dict[str, list[str]]) -> list[str]:
    """Remove blank imports the lock names (a backend whose dependency the proxy refuses); refuse a stale entry."""
    done = []
    for rel, imports in (drops or {}).items():
        path = workdir / rel
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        for module_path in imports:
            wanted = f'_ "{module_path}"'
            kept = [line for line in lines if line.strip() != wanted]
            if len(kept) != len(lines) - 1:
                raise BuildError(f"{rel}: no single import line {wanted} to drop; tools/lock.yml is stale")
            lines = kept
            done.append(f"{rel}: dropped import {module_path}")
        path.write_text("".join(lines), encoding="utf-8")
    return done


def build_go(name: str, entry: dict, workdir: Path, bindir: Path) -> dict:
    dropped = drop_imports(workdir, entry.get("drop_imports"))
    edits = fix_replaces(workdir, entry.get("published_replaces"), f"{entry['module']}@{entry['version']}")
    tags = list(entry.get("tags") or []) + list(entry.get("extra_tags") or [])
    env = go_env()
    env["CGO_ENABLED"] = "1" if entry.get("cgo") else "0"
    pkgs = packages(entry, workdir)
    output = str(bindir / entry["binary"]) if entry.get("binary") else str(bindir) + "/"
    args = ["build", "-trimpath", "-ldflags", ldflags(entry)]
    if tags:
        args += ["-tags", ",".join(tags)]
    _go([*args, "-o", output, *pkgs], cwd=workdir, env=env)
    return {"replaces": edits, "dropped_imports": dropped, "tags": tags, "ldflags": ldflags(entry), "cgo": bool(entry.get("cgo")),
            "packages": pkgs}


def build_c(entry: dict, workdir: Path, bindir: Path) -> dict:
    cc = shutil.which("gcc")
    if not cc:
        raise BuildError("gcc is not installed: apt-get install -y gcc libc6-dev")
    out = bindir / entry["binary"]
    cmd = [cc, "-Os", "-Wall", "-Werror", "-static", f"-DVERSION={entry['c_version']}", "-o", str(out),
           str(workdir / entry["c_source"])]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    return {"c_command": " ".join(cmd[:-3] + [entry["c_source"]])}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def is_current(name: str, entry: dict) -> bool:
    record = pinned_tools.build_record(name)
    return bool(record) and all(record.get(key) == entry.get(key) for key in RECORDED_KEYS)


def build(name: str, entry: dict) -> Path:
    """Build one tool into its cache folder (skipped when that folder holds this lock entry's build)."""
    final = pinned_tools.tool_dir(name)
    root = pinned_tools.root()
    root.mkdir(parents=True, exist_ok=True)
    with filelock.held(root / f".{name}.lock", on_wait=lambda: _say(f"{name}: another build-tools is building it; waiting")):
        if is_current(name, entry):
            _say(f"{name} {entry['version']}: cached in {final}")
            return final
        started = time.monotonic()
        _say(f"{name} {entry['version']}: building from {entry['module']}@{entry['version']} (a few minutes)")
        source = download(entry["module"], entry["version"])
        staging = root / f".{name}.building"
        shutil.rmtree(staging, ignore_errors=True)
        workdir, bindir = staging / "src", staging / "bin"
        bindir.mkdir(parents=True)
        try:
            writable_copy(source, workdir)
            how = build_c(entry, workdir, bindir) if entry.get("c_source") else build_go(name, entry, workdir, bindir)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        shutil.rmtree(workdir)
        record = {key: entry.get(key) for key in RECORDED_KEYS}
        record.update(how=how, go=_go(["env", "GOVERSION"]).strip(), platform=f"{sys.platform}/{platform.machine()}",
                      seconds=round(time.monotonic() - started, 1),
                      sha256={p.name: _sha256(p) for p in sorted(bindir.iterdir())})
        (staging / "build.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        shutil.rmtree(final, ignore_errors=True)
        staging.rename(final)
        _say(f"{name} {entry['version']}: built in {record['seconds']} s: {', '.join(record['sha256'])}")
        return final


def install_packer_plugin(name: str, entry: dict) -> Path:
    """Put a built plugin where `packer init` itself installs it, so init finds it and needs no GitHub.

    Packer 1.9's layout (packer/plugin-getter at v1.9.4): <plugin path>/github.com/hashicorp/<short>/
    packer-plugin-<short>_v<version>_<api>_<os>_<arch> and beside it the same name + `_SHA256SUM`.
    """
    binary = pinned_tools.tool_dir(name) / "bin" / name
    described = json.loads(subprocess.run([str(binary), "describe"], capture_output=True, text=True,
                                          check=True).stdout)
    if described["version"] != entry["version"].lstrip("v"):
        raise BuildError(f"{binary} describe says version {described['version']}, the lock says {entry['version']}")
    short = name.removeprefix("packer-plugin-")
    folder = pinned_tools.packer_plugin_path() / "github.com" / "hashicorp" / short
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{name}_{entry['version']}_{described['api_version']}_linux_amd64"
    for stale in folder.glob(f"{name}_*"):
        if not stale.name.startswith(target.name):
            stale.unlink()
    digest = _sha256(binary)
    checksum = Path(f"{target}_SHA256SUM")
    if target.is_file() and checksum.is_file() and checksum.read_text(encoding="utf-8").strip() == digest == _sha256(target):
        return target  # already installed: never rewrite a plugin a running Packer may be executing
    # A new file renamed over the old one: writing into it fails with ETXTBSY while a Packer runs it.
    partial = folder / f".{target.name}.partial"
    shutil.copy2(binary, partial)
    os.replace(partial, target)
    checksum.write_text(digest, encoding="utf-8")
    return target


def selected(group: str, only: list[str]) -> dict[str, dict]:
    tools = pinned_tools.lock()
    unknown = [n for n in only if n not in tools]
    if unknown:
        raise BuildError(f"no tool {', '.join(unknown)} in tools/lock.yml; it has: {', '.join(tools)}")
    if only:
        return {n: tools[n] for n in only}
    return {n: e for n, e in tools.items() if group == "all" or e["group"] == group}


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="scripts/build-tools", description=__doc__.split("\n\n")[0])
    parser.add_argument("--group", choices=(*GROUPS, "all"), default="ci",
                        help="which tools of tools/lock.yml (default ci: what setup.sh, validate and CI need)")
    parser.add_argument("--only", action="append", default=[], metavar="NAME", help="just this tool (repeatable)")
    parser.add_argument("--list", action="store_true", help="print each tool, its version and whether it is built")
    parser.add_argument("--dry-run", action="store_true", help="say what would be built, build nothing")
    args = parser.parse_args(argv)
    try:
        tools = selected(args.group, args.only)
        if args.list or args.dry_run:
            for name, entry in tools.items():
                state = "built" if is_current(name, entry) else "would build" if args.dry_run else "not built"
                print(f"{name:26} {entry['module'] + '@' + entry['version']:50} {state:11} {pinned_tools.tool_dir(name)}")
            return 0
        started = time.monotonic()
        for name, entry in tools.items():
            build(name, entry)
            if name.startswith("packer-plugin-"):
                install_packer_plugin(name, entry)
        _say(f"{len(tools)} tools ready in {pinned_tools.root()} ({time.monotonic() - started:.0f} s)")
        return 0
    except BuildError as exc:
        print(f"build-tools: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"build-tools: {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("build-tools: interrupted; nothing half-built is kept", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
