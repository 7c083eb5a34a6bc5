"""Credential files are readable by their owner only, on every write, through the real CLI:
mode 0600 here, and on Windows the icacls call (checked at the process boundary with a stand-in
icacls that records its argv); and no credential bypasses k4w.outdir.private."""

from __future__ import annotations

import json
import re
import stat
import sys
from pathlib import Path

import pytest

from k4w.outdir import private
from k4w.render import escape
from tests.helpers import ROOT, config_dict, invoke, write_config

PROXY_PASSWORD = "S3cret-Proxy-Pw"
PROXY = f"http://bob:{PROXY_PASSWORD}@proxy.corp.example:3128"
USER = {"USERNAME": "alice", "USERDOMAIN": "WORKSTATION"}

# Records each call (argv, and the size of the file at that moment), then exits as told.
FAKE_ICACLS = """#!{python}
import json, os, sys
size = os.path.getsize(sys.argv[1]) if os.path.exists(sys.argv[1]) else None
with open({calls!r}, "a") as fh:
    fh.write(json.dumps({{"argv": sys.argv[1:], "size": size}}) + "\\n")
print("processed file: " + sys.argv[1])
sys.exit(int(os.environ.get("FAKE_ICACLS_EXIT", "0")))
"""


@pytest.fixture
def icacls(tmp_path):
    """A stand-in icacls first on PATH, and the Windows ACL branch switched on."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "icacls-calls.jsonl"
    bin_dir.mkdir()
    fake = bin_dir / "icacls"
    fake.write_text(FAKE_ICACLS.format(python=sys.executable, calls=str(calls)))
    fake.chmod(0o755)
    import os

    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", private.WINDOWS_ACL_TEST_ENV: "1", **USER}
    return env, calls


def final_path(recorded: str, out: Path) -> str:
    """Where a restricted file ends up: staged in OUT/.render-*/, or a temp file .NAME.XXXX.tmp."""
    rel = Path(recorded).relative_to(out).as_posix()
    rel = re.sub(r"^\.render-[^/]+/", "", rel)
    return re.sub(r"(^|/)\.([^/]+)\.[^./]+\.tmp$", r"\1\2", rel)


def credential_files(out: Path) -> set[str]:
    admin = json.loads((out / "secrets" / "windows-1803.json").read_text())["admin_password"]
    needles = [PROXY_PASSWORD, admin, escape.unattend_password(admin, "AdministratorPassword")]
    found = {p.relative_to(out).as_posix() for p in out.rglob("*")
             if p.is_file() and any(n in p.read_text(errors="replace") for n in needles)}
    # The files known to carry one must be among them, so the test cannot pass by finding none.
    assert {"http/windows-1803/Autounattend.xml", "secrets/windows-1803.json"} <= found
    return found


def test_every_credential_file_gets_the_owner_only_acl_before_its_text_is_written(icacls, tmp_path):
    env, calls = icacls
    config = write_config(tmp_path / "c.yml", config_dict(**{"proxy.http": PROXY, "proxy.https": PROXY}))
    out = tmp_path / "out"
    result = invoke("render", "--config", str(config), "--out", str(out), env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    recorded = [json.loads(line) for line in calls.read_text().splitlines()]
    for call in recorded:
        path = call["argv"][0]
        assert call["argv"] == [path, "/inheritance:r", "/grant:r", "WORKSTATION\\alice:(F)", "*S-1-5-18:(F)"]
        assert call["size"] == 0, call  # restricted while empty: the secret never sits in a readable file
    restricted = {final_path(c["argv"][0], out) for c in recorded}
    assert credential_files(out) <= restricted
    assert {rel for rel in restricted if not rel.startswith(("packer/", "http/", "secrets/"))} == set()


def test_a_secrets_file_that_exists_readable_by_others_is_tightened_by_a_render(icacls, tmp_path):
    env, calls = icacls
    out = tmp_path / "out"
    secrets = out / "secrets" / "windows-1803.json"
    secrets.parent.mkdir(parents=True)
    secrets.write_text(json.dumps({"admin_password": "Existing-Password-1aA"}))
    secrets.chmod(0o644)
    result = invoke("render", "--out", str(out), env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o600
    assert json.loads(secrets.read_text())["admin_password"] == "Existing-Password-1aA"  # kept, not rotated
    assert "secrets/windows-1803.json" in {final_path(json.loads(l)["argv"][0], out) for l in calls.read_text().splitlines()}


def test_an_icacls_failure_stops_the_render_naming_the_file_and_out_is_untouched(icacls, tmp_path):
    env, _ = icacls
    out = tmp_path / "out"
    result = invoke("render", "--out", str(out), env={**env, "FAKE_ICACLS_EXIT": "5"})
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stdout + result.stderr
    assert "icacls could not restrict it to WORKSTATION\\alice and SYSTEM (exit 5)" in result.stderr
    assert not (out / "packer").exists() and not (out / "secrets" / "windows-1803.json").exists()


def test_no_credential_write_bypasses_k4w_private():
    """The class check: an owner-only mode written anywhere but k4w/outdir/private.py is a credential
    write that would get no Windows ACL (os.chmod(0o600) does nothing on NTFS)."""
    owner_only = re.compile(r"0o[0-7]?[46]00\b|S_IRUSR|S_IWUSR")
    offenders = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
                 for path in sorted((ROOT / "k4w").rglob("*.py")) if path.name != "private.py"
                 for n, line in enumerate(path.read_text().splitlines(), 1) if owner_only.search(line)]
    assert offenders == [], "write credentials with k4w.outdir.private.write_private/open_private:\n" + "\n".join(offenders)
