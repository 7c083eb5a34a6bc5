"""The pinned upstream tools (tools/lock.yml): scripts/build-tools builds them, and they are the real programs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from k4w.devtools import gotools
from k4w.infra import pinned_tools

ROOT = Path(__file__).resolve().parents[2]
BUILD_TOOLS = ROOT / "scripts" / "build-tools"
LOCK = pinned_tools.lock()


def _run(cmd, **kw):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=120, **kw)


def _built(name: str, program: str | None = None) -> Path:
    path = pinned_tools.binary(name, program)
    assert path, f"{name} is not built in {pinned_tools.root()}: run scripts/build-tools (scripts/setup.sh does)"
    return path


def test_every_lock_entry_says_what_it_is_and_why():
    for name, entry in LOCK.items():
        assert entry["group"] in gotools.GROUPS, name
        assert entry["module"] and entry["version"].startswith("v"), name
        assert entry.get("packages") or entry.get("c_source"), name
        assert len(entry.get("why", "")) > 20, f"{name}: say why this module and version"


# (tool, program, arguments, what its output must hold): each program's own version report.
VERSION_REPORTS = [
    ("packer", "packer", ["version"], "Packer v1.9.4"),
    ("containerd", "containerd", ["--version"], " v2.3.7"),
    ("containerd", "ctr", ["--version"], " v2.3.7"),
    ("runc", "runc", ["--version"], "runc version 1.5.2"),
    ("cni-plugins", "bridge", [], "CNI bridge plugin v1.9.1"),
    ("cni-plugins", "host-local", [], "CNI host-local plugin v1.9.1"),
    ("kubernetes-node", "kubeadm", ["version", "-o", "short"], "v1.37.2"),
    ("kubernetes-node", "kubelet", ["--version"], "Kubernetes v1.37.2"),
    ("kubernetes-node", "kubectl", ["version", "--client"], "Client Version: v1.37.2"),
]


@pytest.mark.parametrize("tool,program,args,expected", VERSION_REPORTS, ids=[f"{r[1]}" for r in VERSION_REPORTS])
def test_each_ci_tool_is_built_and_reports_its_pinned_version(tool, program, args, expected):
    assert LOCK[tool]["group"] == "ci"
    proc = _run([_built(tool, program), *args])
    assert expected in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def test_runc_is_static_and_has_seccomp():
    """The release runc.amd64 is static with seccomp; ours runs in a guest without libseccomp the same way."""
    runc = _built("runc")
    assert "seccomp" in _run([runc, "--version"]).stdout
    assert "statically linked" in _run(["file", "-L", runc]).stdout or "not a dynamic" in _run(["ldd", runc]).stdout + _run(["ldd", runc]).stderr


@pytest.mark.parametrize("name", [n for n in LOCK if n.startswith("packer-plugin-")])
def test_each_packer_plugin_is_installed_where_packer_init_looks(name):
    entry = LOCK[name]
    short = name.removeprefix("packer-plugin-")
    folder = pinned_tools.packer_plugin_path() / "github.com" / "hashicorp" / short
    installed = sorted(p for p in folder.glob(f"{name}_{entry['version']}_x*_linux_amd64"))
    assert len(installed) == 1, f"{folder}: {sorted(p.name for p in folder.glob('*'))}"
    described = json.loads(_run([installed[0], "describe"]).stdout)
    assert described["version"] == entry["version"].lstrip("v"), "a prerelease suffix makes packer init refuse it"
    digest = Path(f"{installed[0]}_SHA256SUM").read_text().strip()
    assert digest == gotools._sha256(installed[0])


def test_list_names_every_tool_with_its_state(tmp_path):
    proc = _run([BUILD_TOOLS, "--list", "--group", "all"], env={**os.environ, "K4W_TOOLS_DIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    for name, entry in LOCK.items():
        assert f"{entry['module']}@{entry['version']}" in proc.stdout and name in proc.stdout
    assert "not built" in proc.stdout


def test_dry_run_builds_nothing(tmp_path):
    proc = _run([BUILD_TOOLS, "--dry-run"], env={**os.environ, "K4W_TOOLS_DIR": str(tmp_path / "tools")})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("would build") == sum(1 for e in LOCK.values() if e["group"] == "ci")
    assert not (tmp_path / "tools").exists()


def test_an_unknown_tool_is_one_line_naming_the_known_ones(tmp_path):
    proc = _run([BUILD_TOOLS, "--only", "packr"], env={**os.environ, "K4W_TOOLS_DIR": str(tmp_path)})
    assert proc.returncode == 1
    assert "no tool packr in tools/lock.yml" in proc.stderr and "packer" in proc.stderr
    assert "Traceback" not in proc.stderr


def _module(tmp_path: Path) -> Path:
    mod = tmp_path / "mod"
    (mod / "present").mkdir(parents=True)
    (mod / "present" / "go.mod").write_text("module example.com/present\n")
    (mod / "go.mod").write_text(
        "module example.com/m\n\ngo 1.22\n\nrequire (\n\texample.com/staged v0.0.0\n\texample.com/present v0.0.0\n)\n\n"
        "replace (\n\texample.com/staged => ./staging/staged\n\texample.com/present => ./present\n"
        "\texample.com/guard => ./FORBIDDEN\n)\n")
    return mod


def test_replaces_into_folders_the_zip_lacks_point_at_the_published_release(tmp_path):
    mod = _module(tmp_path)
    edits = gotools.fix_replaces(mod, "v0.35.4")
    got = {r["Old"]["Path"]: r["New"] for r in json.loads(_run(["go", "mod", "edit", "-json"], cwd=mod).stdout)["Replace"]}
    assert got["example.com/staged"] == {"Path": "example.com/staged", "Version": "v0.35.4"}
    assert got["example.com/present"] == {"Path": "./present"}, "a folder that is there stays the module's choice"
    assert "example.com/guard" not in got, "a guard replace of a module never required is dropped"
    assert len(edits) == 2


def test_a_missing_folder_without_a_published_release_is_refused(tmp_path):
    with pytest.raises(gotools.BuildError, match="published_replaces"):
        gotools.fix_replaces(_module(tmp_path), None)


def test_a_failed_build_leaves_nothing_taken_for_built(tmp_path):
    """A go that fails mid-build: exit 1 with go's message, no tool folder, no half-built folder."""
    source = tmp_path / "mod"
    source.mkdir()
    (source / "go.mod").write_text("module example.com/m\n\ngo 1.22\n")
    fake = tmp_path / "bin" / "go"
    fake.parent.mkdir()
    fake.write_text(f"""#!{sys.executable}
import json, os, subprocess, sys
args = sys.argv[1:]
if args[:2] == ["mod", "download"]:
    print(json.dumps({{"Dir": {str(source)!r}}}))
elif args[:1] == ["build"]:
    sys.stderr.write("compile: planted failure\\n"); sys.exit(2)
else:
    sys.exit(subprocess.run(["{subprocess.run(['which', 'go'], capture_output=True, text=True).stdout.strip()}", *args]).returncode)
""")
    fake.chmod(0o755)
    tools = tmp_path / "tools"
    env = {**os.environ, "K4W_TOOLS_DIR": str(tools), "PATH": f"{fake.parent}{os.pathsep}{os.environ['PATH']}"}
    proc = _run([BUILD_TOOLS, "--only", "runc"], env=env)
    assert proc.returncode == 1
    assert "planted failure" in proc.stderr and "Traceback" not in proc.stderr
    assert [p.name for p in tools.iterdir() if not p.name.endswith(".lock")] == []


def test_a_second_run_leaves_a_running_plugin_alone(tmp_path):
    """setup.sh runs build-tools every time; a Packer running a plugin then must not make it fail (ETXTBSY)."""
    name = "packer-plugin-vagrant"
    installed = gotools.install_packer_plugin(name, LOCK[name])
    before = installed.stat().st_ino
    # A plugin server waiting for Packer, as during a `packer validate`: it needs Packer's magic cookie
    # (packer-plugin-sdk@v0.3.0 plugin/server.go MagicCookieKey/MagicCookieValue) and runs until killed.
    cookie = {"PACKER_PLUGIN_MAGIC_COOKIE": "d602bf8f470bc67ca7faa0386276bbdd4330efaf76d1a219cb4d6991ca9872b2",
              "PACKER_PLUGIN_MIN_PORT": "10000", "PACKER_PLUGIN_MAX_PORT": "25000"}
    running = subprocess.Popen([str(installed), "start", "post-processor", "-packer-default-plugin-name-"],
                               env={**os.environ, **cookie}, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert running.stdout.readline(), "the plugin server did not start"
    try:
        proc = _run([BUILD_TOOLS, "--only", name])
        assert proc.returncode == 0, proc.stderr
    finally:
        running.kill()
        running.wait()
    assert installed.stat().st_ino == before, "an installed plugin of the same digest is not rewritten"
