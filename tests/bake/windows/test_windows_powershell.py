"""The Windows guest scripts: every .ps1 parses, follows the common header, and never uses a
download before checking its hash (static analysis over the real scripts, and proof that the
analysis catches the mistakes it is meant to catch)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from k4w.infra.sources import REPO_ROOT as ROOT
from k4w.validate.powershell_rules import lint_errors, parse_errors, parse_text_errors

from windows_ps_static import download_problems, verified_downloads

GUEST = ROOT / "guest" / "windows"
# What the Packer build runs or uploads: Setup bootstrap, bake steps, the shared library.
BOX_BUILD_SCRIPTS = sorted([*(GUEST / "setup").glob("*.ps1"), *(GUEST / "bake").glob("*.ps1"), GUEST / "common.ps1"])
ALL_SCRIPTS = sorted(GUEST.rglob("*.ps1"))
# Written by the cluster-up work, not the box build; parsed here too, but their header and
# download rules are that work's business.
NOT_BOX_SCRIPTS = {"start-node.ps1"}
BOX_SCRIPTS = [p for p in ALL_SCRIPTS if p.name not in NOT_BOX_SCRIPTS and not p.name.startswith("cluster-")]
HEADER = ("$ErrorActionPreference = 'Stop'", "Set-StrictMode -Version Latest", "trap {")


def _id(path: Path) -> str:
    return str(path.relative_to(GUEST))


def test_the_scripts_are_found():
    names = {p.name for p in BOX_SCRIPTS}
    assert {"common.ps1", "k4w-bootstrap.ps1", "kube-cleanup.ps1", "00-preflight.ps1", "12-cleanup.ps1"} <= names


@pytest.mark.parametrize("script", ALL_SCRIPTS, ids=_id)
def test_every_script_parses(script):
    assert parse_errors(script) == []
    assert lint_errors(script) == []


def test_the_parser_reports_broken_powershell(tmp_path):
    broken = "function Get-X {\n  if ($a) { 'x'\n}\n"
    problems = parse_text_errors(broken)
    assert problems and problems[0].split(":")[0].isdigit() and "missing" in problems[0]
    path = tmp_path / "broken.ps1"
    path.write_text(broken)
    assert parse_errors(path) == problems
    assert parse_text_errors("Write-Host 'fine'\n") == []


def test_the_lint_reports_an_invalid_variable_reference(tmp_path):
    bad = tmp_path / "bad.ps1"
    bad.write_text('Write-Host "$name: done and ${ok}: and $env:Path"\n')
    [problem] = lint_errors(bad)
    assert '"$name:"' in problem


# Dot-sourced libraries run inside their caller, whose header and trap apply.
DOT_SOURCED = ("common.ps1", "hns.ps1", "cri-sandboxes.ps1", "cluster-route.ps1", "hostprocess-lib.ps1",
               "node-lib.ps1")


@pytest.mark.parametrize("script", [p for p in BOX_SCRIPTS if p.name not in DOT_SOURCED], ids=_id)
def test_every_script_starts_with_the_common_header(script):
    # Header = the first lines of code after the comment block and param().
    lines = [line.strip() for line in script.read_text().splitlines()]
    code = lines[next(i for i, line in enumerate(lines) if line.startswith("$ErrorActionPreference")):]
    assert code[0] == HEADER[0] and code[1] == HEADER[1], script.name
    assert any(line.startswith(HEADER[2]) for line in code[2:5]), f"{script.name}: no trap right after the header"


@pytest.mark.parametrize("script", BOX_SCRIPTS, ids=_id)
def test_no_download_is_used_before_its_hash_is_checked(script):
    assert download_problems(script.read_bytes(), script.name) == []


@pytest.mark.parametrize("box", sorted(p.stem for p in (ROOT / "boxes").glob("windows-*.yml")))
def test_every_profile_component_is_downloaded_verified_exactly_once(box):
    """By the box's own steps: the scripts its provision list runs, and what they share."""
    profile = yaml.safe_load((ROOT / "boxes" / f"{box}.yml").read_text())
    steps = [GUEST / "bake" / s for s in profile["provision"] if s.endswith(".ps1")]
    downloaded = [c for p in [*steps, GUEST / "common.ps1"] for c in verified_downloads(p.read_bytes())]
    assert sorted(downloaded) == sorted(profile["components"])


BAD_SCRIPTS = {
    "raw Invoke-WebRequest in a provisioning script": (
        "03-docker.ps1",
        b"Invoke-WebRequest -Uri $u -OutFile C:\\docker.zip -UseBasicParsing\nExpand-Archive C:\\docker.zip\n",
        "raw download 'invoke-webrequest'",
    ),
    "WebClient.DownloadFile": (
        "05-kubernetes-node.ps1",
        b"(New-Object Net.WebClient).DownloadFile($u, $p)\n",
        "raw download 'downloadfile'",
    ),
    "curl.exe": ("07-nssm.ps1", b"curl.exe -L -o nssm.zip $u\n", "raw download 'curl.exe'"),
    "raw primitive inside common.ps1": (
        "common.ps1",
        b"function Get-Thing {\n  Invoke-WebRequest -Uri $u -OutFile $p\n}\n",
        "raw download 'invoke-webrequest'",
    ),
    "build-CD file used before its hash is checked": (
        "common.ps1",
        b"function Get-K4wVerifiedFile {\n  $path = Find-K4wBuildMediaFile -Name $name\n"
        b"  Copy-Item $path C:\\k\n  Assert-K4wFileHash -Path $path -Algorithm SHA256 -Expected $h -What x\n}\n",
        "used before Assert-K4wFileHash",
    ),
    "build-CD file never hash-checked": (
        "common.ps1",
        b"function Get-K4wVerifiedFile {\n  $path = Find-K4wBuildMediaFile -Name $name\n  return $path\n}\n",
        "used before Assert-K4wFileHash",
    ),
    "image archive imported without the digest check": (
        "04-prepull-images.ps1",
        b"$archive = Find-K4wBuildMediaFile -Name $n\n"
        b"Invoke-K4wExe -FilePath $ctr -ArgumentList @('images', 'import', $archive)\n"
        b"Write-K4wStep 'imported'\n",
        "used before Assert-K4wFileHash",
    ),
    "image archive used before its import": (
        "04-prepull-images.ps1",
        b"$archive = Find-K4wBuildMediaFile -Name $n\n"
        b"Copy-Item $archive C:\\k\n"
        b"Invoke-K4wExe -FilePath $ctr -ArgumentList @('images', 'import', $archive)\n"
        b"$got = Get-ImageDigest $name\n"
        b"if ($got -ne $digest) { throw 'not the pinned digest' }\n",
        "used before Assert-K4wFileHash",
    ),
    "image archive checked against something other than the pinned digest": (
        "04-prepull-images.ps1",
        b"$archive = Find-K4wBuildMediaFile -Name $n\n"
        b"Invoke-K4wExe -FilePath $ctr -ArgumentList @('images', 'import', $archive)\n"
        b"$got = Get-ImageDigest $name\n"
        b"if ($got -ne $got) { throw 'never' }\n",
        "used before Assert-K4wFileHash",
    ),
    "build-CD file not kept for the check": (
        "common.ps1",
        b"function Get-K4wVerifiedFile {\n  Expand-Archive (Find-K4wBuildMediaFile -Name $name)\n}\n",
        "used before Assert-K4wFileHash",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_SCRIPTS))
def test_the_download_analysis_catches(case):
    name, source, expected = BAD_SCRIPTS[case]
    problems = download_problems(source, name)
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize("script", sorted((GUEST / "bake").glob("*.ps1")), ids=lambda p: p.name)
def test_every_bake_step_ends_with_an_explicit_success(script):
    """Packer's powershell provisioner ends its wrapper with `exit $LastExitCode`: a native tool's
    last code (DISM's 3010, "reboot required") would fail the step unless the script exits 0."""
    lines = [line.strip() for line in script.read_text().splitlines() if line.strip() and not line.strip().startswith("#")]
    assert lines[-1] == "exit 0"
