"""build_box / build_boxes against the fake `packer` replaying recorded transcripts; the
repository's real Packer templates keep the interface the runner relies on (docs/internals.md);
and one build through real Packer and real Vagrant."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import signal
import subprocess
import tarfile
import threading
import time
from pathlib import Path

import pytest
from rich.console import Console

from k4w.model import config, profiles
from k4w.infra import packer_hcl
from k4w import render
from k4w.derive.cluster import Cluster
from k4w.infra.errors import K4wError
from k4w.bake import BuildFailed, build_box, build_boxes, cache, catalogue
from k4w.infra import packer_cli
from k4w.bake.transcript import plan_steps
from k4w.infra.sources import REPO_ROOT as ROOT
from tests.helpers import gone_within, system_tool

from .conftest import PROXY, PROXY_PASSWORD


def test_windows_build_lands_box_catalogue_and_record(repo, fake_packer, console):
    fake_packer.scenario("windows-1803", "windows-success.txt")
    result = build_box(repo.cluster(), "windows-1803", repo.out, console=console)

    box = repo.out / "boxes" / "windows-1803-hyperv.box"
    assert result.status == "built" and box.is_file()
    assert not (repo.out / "boxes" / ".partial").exists()
    with tarfile.open(box) as tar:
        assert json.load(tar.extractfile("metadata.json")) == {"provider": "hyperv"}

    meta = json.loads((repo.out / "boxes" / "windows-1803.json").read_text())
    assert meta["name"] == "k4w/windows-1803"
    version = meta["versions"][0]
    assert re.fullmatch(r"\d{8}\.\d{6}", version["version"])
    provider = version["providers"][0]
    assert provider["name"] == "hyperv" and provider["checksum_type"] == "sha256"
    assert provider["url"] == box.resolve().as_uri()
    assert provider["checksum"] == subprocess.run(["sha256sum", box], capture_output=True, text=True).stdout.split()[0]

    record = json.loads((repo.out / "boxes" / "windows-1803.record.json").read_text())
    assert record["box"] == "windows-1803" and record["test"] is None
    assert record["components"] == {"kubernetes": "1.11.10", "docker": "18.09.2"}
    assert record["packer"] == "1.9.4"
    assert record["iso"]["name"] == "windows-server-1803.iso"
    assert record["iso"]["sha256"] == hashlib.sha256(repo.isos["windows-1803"].read_bytes()).hexdigest()
    assert record["box_sha256"] == provider["checksum"]
    assert record["build"]["duration_s"] >= 0 and record["build"]["started"] <= record["build"]["finished"]
    assert len(record["stamp"]["sha256"]) == 64

    # plain (non-terminal) progress: one line per phase and per provisioner step
    assert "provisioner 2/4: restart" in console.text and "provisioner 4/4: docker.ps1" in console.text
    assert "Waiting for WinRM to become available" in console.text
    assert "windows-1803  built" in console.text


def test_packer_gets_the_rotated_password_and_no_packer_log(repo, fake_packer, console):
    cluster = repo.cluster()
    render.render(cluster, repo.out)
    before = render.load_secrets(repo.out, "windows-1803")["admin_password"]
    fake_packer.scenario("windows-1803", "windows-success.txt")
    build_box(cluster, "windows-1803", repo.out, console=console)

    call = fake_packer.builds()[0]
    assert call["argv"] == ["build", "-machine-readable", "-force", "-on-error=cleanup", str(repo.out / "packer" / "windows-1803.pkr.hcl")]
    assert call["cwd"] == str(repo.out)
    assert not call["packer_log_set"] and call["checkpoint_disable"] == "1"
    password = call["admin_password"]
    assert password and password != before  # rotated for this build
    assert f"<AdministratorPassword>{password}</AdministratorPassword>" in (repo.out / "http" / "windows-1803" / "Autounattend.xml").read_text()
    text = (repo.out / "packer" / "windows-1803.pkr.hcl").read_text()
    assert password not in text and "K4W_ADMIN_PASSWORD" not in text.replace('env("K4W_ADMIN_PASSWORD")', "")


@pytest.mark.parametrize("box", ["windows-1803", "ubuntu-1604"])
def test_packer_gets_the_proxy_credentials_from_its_environment_not_from_the_template(box, repo, fake_packer, console):
    cluster = repo.cluster(proxy=PROXY)
    fake_packer.scenario(box, "windows-success.txt" if box.startswith("windows") else "ubuntu-success.txt")
    build_box(cluster, box, repo.out, console=console)
    assert fake_packer.builds()[0]["variables"]["http_proxy"] == PROXY
    # The real templates' whole text is checked in tests/bake/windows and tests/bake/ubuntu.
    template = packer_hcl.load(repo.out / "packer" / f"{box}.pkr.hcl")
    assert PROXY_PASSWORD not in json.dumps(template["variables"])


def test_log_has_full_transcript_with_credentials_redacted(repo, fake_packer, console):
    fake_packer.scenario("windows-1803", "windows-success.txt")
    build_box(repo.cluster(proxy=PROXY), "windows-1803", repo.out, console=console)
    log = (repo.out / "logs" / "windows-1803.log").read_text()
    password = fake_packer.builds()[0]["admin_password"]
    assert "machine proxy set to http://***@proxy.corp.example:3128" in log
    assert "Administrator password check: ***" in log
    assert PROXY_PASSWORD not in log and password not in log
    assert "Creating virtual machine..." in log and "artifact,0,file,0," in log  # the raw lines, all of them
    assert PROXY_PASSWORD not in console.text and password not in console.text


def test_up_to_date_box_is_skipped_without_running_packer(repo, fake_packer, console):
    cluster = repo.cluster()
    fake_packer.scenario("ubuntu-1604", "ubuntu-success.txt")
    build_box(cluster, "ubuntu-1604", repo.out, console=console)
    calls = len(fake_packer.calls())
    box_mtime = (repo.out / "boxes" / "ubuntu-1604-hyperv.box").stat().st_mtime_ns

    result = build_box(cluster, "ubuntu-1604", repo.out, console=console)
    assert result.status == "up to date"
    assert "up to date" in console.text
    assert len(fake_packer.calls()) == calls  # packer not invoked at all, not even for its version
    assert (repo.out / "boxes" / "ubuntu-1604-hyperv.box").stat().st_mtime_ns == box_mtime


def test_force_rebuilds_an_up_to_date_box(repo, fake_packer, console):
    cluster = repo.cluster()
    fake_packer.scenario("ubuntu-1604", "ubuntu-success.txt")
    build_box(cluster, "ubuntu-1604", repo.out, console=console)
    result = build_box(cluster, "ubuntu-1604", repo.out, force=True, console=console)
    assert result.status == "built" and len(fake_packer.builds()) == 2


def test_changed_provision_script_triggers_a_rebuild_and_says_why(repo, fake_packer, console):
    cluster = repo.cluster()
    fake_packer.scenario("ubuntu-1604", "ubuntu-success.txt")
    build_box(cluster, "ubuntu-1604", repo.out, console=console)
    (repo.root / "guest" / "ubuntu" / "bake" / "kubernetes.sh").write_text("#!/usr/bin/env bash\nset -euo pipefail\necho changed\n")
    result = build_box(cluster, "ubuntu-1604", repo.out, console=console)
    assert result.status == "built" and len(fake_packer.builds()) == 2
    assert "inputs changed: guest/ubuntu/bake/kubernetes.sh" in console.text


def test_failed_provisioner_cleans_up_and_names_log_and_step(repo, fake_packer, console):
    fake_packer.scenario("windows-1803", "windows-provisioner-failure.txt", exit=1, write_box=True)
    (repo.out / "packer-vm" / "windows-1803").mkdir(parents=True)
    with pytest.raises(BuildFailed) as failure:
        build_box(repo.cluster(), "windows-1803", repo.out, console=console)
    message = str(failure.value)
    log = repo.out / "logs" / "windows-1803.log"
    assert str(log) in message
    assert "provisioner 4/4 (docker.ps1)" in message
    assert "Script exited with non-zero exit status: 1" in message
    assert list((repo.out / "boxes").glob("*.box")) == []  # the half-written box never landed
    assert not (repo.out / "boxes" / ".partial").exists()
    assert not (repo.out / "packer-vm" / "windows-1803").exists()
    assert not (repo.out / "boxes" / "windows-1803.json").exists()
    assert "# result: windows-1803: build failed at provisioner 4/4" in log.read_text()


def test_interrupted_build_is_reported_as_interrupted(repo, fake_packer, console):
    fake_packer.scenario("windows-1803", "windows-interrupted.txt", exit=1, write_box=False)
    with pytest.raises(BuildFailed) as failure:
        build_box(repo.cluster(), "windows-1803", repo.out, console=console)
    assert failure.value.results[0].status == "interrupted"
    assert "build interrupted at 'Waiting for WinRM to become available...'" in str(failure.value)


def test_parallel_build_keeps_the_success_and_reports_the_failure(repo, fake_packer, console):
    # Slow enough that both Packers run at the same time.
    fake_packer.scenario("windows-1803", "windows-success.txt", line_delay=0.01)
    fake_packer.scenario("ubuntu-1604", "ubuntu-ssh-timeout.txt", exit=1, write_box=False, line_delay=0.01)
    with pytest.raises(BuildFailed) as failure:
        build_boxes(repo.cluster(), ["windows-1803", "ubuntu-1604"], repo.out, console=console)
    results = {r.box: r for r in failure.value.results}
    assert results["windows-1803"].status == "built" and results["ubuntu-1604"].status == "failed"
    assert (repo.out / "boxes" / "windows-1803-hyperv.box").is_file()
    assert not (repo.out / "boxes" / "ubuntu-1604-hyperv.box").exists()
    for box in ("windows-1803", "ubuntu-1604"):
        assert "Creating virtual machine" in (repo.out / "logs" / f"{box}.log").read_text()
    assert "Timeout waiting for SSH." in str(failure.value)
    assert "windows-1803" not in str(failure.value).split("\n")[0]
    summary = console.text[console.text.rindex("box "):]
    assert re.search(r"windows-1803\s+built\s+\d\dm\d\ds\s+\S+windows-1803\.log", summary)
    assert re.search(r"ubuntu-1604\s+FAILED\s+\d\dm\d\ds\s+\S+ubuntu-1604\.log", summary)
    assert len(fake_packer.builds()) == 2


def test_dry_run_prints_commands_and_changes_nothing(repo, fake_packer, console):
    build_box(repo.cluster(proxy=PROXY), "windows-1803", repo.out, dry_run=True, console=console)
    text = console.text
    # Only the probes the real build's preflight makes (its version, its plugins), never an init or a build.
    assert fake_packer.builds() == [] and all("version" in c["argv"] or c["argv"][:2] == ["plugins", "installed"]
                                              for c in fake_packer.calls())
    assert not repo.out.exists()
    template = repo.out / "packer" / "windows-1803.pkr.hcl"
    assert f"packer init {template}" in text
    assert f"packer build -machine-readable -force -on-error=cleanup {template}" in text
    assert "export K4W_ADMIN_PASSWORD=<secret from" in text
    assert "unset PACKER_LOG" in text
    assert "would build: no previous build" in text
    assert f"iso: would verify {repo.isos['windows-1803']}" in text
    assert "export HTTPS_PROXY=http://***@proxy.corp.example:3128" in text
    assert PROXY_PASSWORD not in text


def test_dry_run_says_it_would_skip_an_up_to_date_box(repo, fake_packer, console):
    cluster = repo.cluster()
    fake_packer.scenario("ubuntu-1604", "ubuntu-success.txt")
    build_box(cluster, "ubuntu-1604", repo.out, console=console)
    calls = len(fake_packer.calls())
    result = build_box(cluster, "ubuntu-1604", repo.out, dry_run=True, console=console)
    assert result.status == "would skip" and "would skip, up to date" in console.text
    assert len(fake_packer.calls()) == calls


def test_dry_run_with_an_iso_elsewhere_prints_the_packer_command_that_installs_from_it(repo, fake_packer, console,
                                                                                        tmp_path):
    elsewhere = tmp_path / "my images" / "server 1803.iso"
    elsewhere.parent.mkdir()
    elsewhere.write_bytes(repo.isos["windows-1803"].read_bytes())
    build_box(repo.cluster(), "windows-1803", repo.out, iso=elsewhere, dry_run=True, console=console)
    template = repo.out / "packer" / "windows-1803.pkr.hcl"
    assert (f"packer build -machine-readable -force -on-error=cleanup -var 'iso_path={elsewhere}' {template}"
            in console.text.replace("\n    ", " "))
    assert f"iso: would verify {elsewhere}" in console.text and fake_packer.builds() == []


def test_iso_for_a_box_whose_template_takes_no_iso_path_is_refused(repo, fake_packer, console, tmp_path):
    # As a template whose builder installs from no ISO (the qemu builder's disk image) or that
    # predates the variable: --iso would be verified and then not used.
    template = repo.root / "templates" / "packer" / "ubuntu.pkr.hcl.j2"
    text = template.read_text().replace("coalesce(var.iso_path, << paths.iso | hcl >>)", "<< paths.iso | hcl >>")
    template.write_text(re.sub(r'variable "iso_path" \{[^}]*\}', "", text))
    with pytest.raises(K4wError, match="--iso names an ISO, but its template .* installs from none"):
        build_box(repo.cluster(), "ubuntu-1604", repo.out, iso=tmp_path / "x.iso", console=console)
    assert fake_packer.builds() == []


def test_iso_problem_fails_that_box_before_packer(repo, fake_packer, console):
    repo.isos["windows-1803"].write_bytes(b"a different image")
    with pytest.raises(BuildFailed) as failure:
        build_box(repo.cluster(), "windows-1803", repo.out, console=console)
    assert "checksum mismatch" in str(failure.value)
    assert fake_packer.builds() == []


def test_a_mismatched_iso_is_refused_alike_by_the_dry_run_which_hashes_it_and_records_nothing(repo, fake_packer, console):
    repo.isos["windows-1803"].write_bytes(b"a different image")
    with pytest.raises(BuildFailed, match="checksum mismatch") as dry:
        build_box(repo.cluster(), "windows-1803", repo.out, dry_run=True, console=console)
    assert "would refuse before Packer starts" in str(dry.value)
    assert not repo.out.exists()  # no hash cache either
    with pytest.raises(BuildFailed, match="checksum mismatch"):
        build_box(repo.cluster(), "windows-1803", repo.out, console=console)
    assert fake_packer.builds() == []


def test_an_iso_without_a_known_checksum_is_refused_alike_by_the_dry_run(repo, fake_packer, console):
    catalogue = repo.root / "iso" / "catalogue.yml"
    catalogue.write_text(catalogue.read_text().splitlines()[0] + "\n{}\n")
    for dry_run in (True, False):
        with pytest.raises(BuildFailed, match="no known sha256 for windows-server-1803.iso"):
            build_box(repo.cluster(), "windows-1803", repo.out, dry_run=dry_run, console=console)
    assert fake_packer.builds() == []


def test_packer_gets_the_iso_checksum_to_check_again(repo, fake_packer, console):
    fake_packer.scenario("windows-1803", "windows-success.txt")
    build_box(repo.cluster(), "windows-1803", repo.out, console=console)
    sha = hashlib.sha256(repo.isos["windows-1803"].read_bytes()).hexdigest()
    assert fake_packer.builds()[0]["iso_checksums"] == [f"sha256:{sha}"]


def test_a_template_that_would_not_check_the_iso_is_refused(repo, fake_packer, console):
    template = repo.root / "templates" / "packer" / "windows.pkr.hcl.j2"
    template.write_text(template.read_text().replace('<< ("sha256:" ~ paths.iso_sha256) | hcl >>', '"none"'))
    with pytest.raises(BuildFailed, match="iso_checksum 'none', not 'sha256:"):
        build_box(repo.cluster(), "windows-1803", repo.out, console=console)
    assert fake_packer.builds() == []


def test_packer_too_old_is_refused_before_building(repo, fake_packer, console, monkeypatch):
    monkeypatch.setenv("FAKE_PACKER_VERSION", "1.5.6")
    fake_packer.scenario("ubuntu-1604", "ubuntu-success.txt")
    with pytest.raises(Exception, match=r"packer 1\.5\.6 is too old"):
        build_box(repo.cluster(), "ubuntu-1604", repo.out, console=console)
    assert fake_packer.builds() == []


def test_record_carries_git_revision_and_dirty_flag(repo, fake_packer, console, monkeypatch):
    for name, value in {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
                        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}.items():
        monkeypatch.setenv(name, value)
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "fixture"]):
        subprocess.run(cmd, cwd=repo.root, check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo.root, capture_output=True, text=True).stdout.strip()
    fake_packer.scenario("ubuntu-1604", "ubuntu-success.txt")
    build_box(repo.cluster(), "ubuntu-1604", repo.out, console=console)
    record = json.loads((repo.out / "boxes" / "ubuntu-1604.record.json").read_text())
    assert record["git"] == {"commit": head, "dirty": False}
    (repo.root / "guest" / "ubuntu" / "bake" / "base.sh").write_text("#!/usr/bin/env bash\nset -euo pipefail\necho edited\n")
    build_box(repo.cluster(), "ubuntu-1604", repo.out, console=console)
    record = json.loads((repo.out / "boxes" / "ubuntu-1604.record.json").read_text())
    assert record["git"] == {"commit": head, "dirty": True}


def _signal_when(ready, signum: int, timeout: float = 120) -> threading.Thread:
    """A started thread that sends signum to this process once ready() holds, or never. The wait
    is long because a loaded machine (the suite on both cores beside a QEMU bake) starts the fake
    Packer and its plugin slowly: 20 s once ran out before the partial box appeared."""

    def send():
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ready():
                os.kill(os.getpid(), signum)
                return
            time.sleep(0.05)

    thread = threading.Thread(target=send)
    thread.start()
    return thread


def test_ctrl_c_is_forwarded_once_and_the_partial_box_removed(repo, fake_packer, console):
    fake_packer.scenario("windows-1803", "windows-interrupted.txt", exit=1, write_box=True, wait_for_interrupt=True)

    log = repo.out / "logs" / "windows-1803.log"

    # Only once Packer is streaming (the runner is then waiting on it); never a stray SIGINT
    # that would stop the whole test session.
    presser = _signal_when(lambda: log.is_file() and "Waiting for WinRM to become available" in log.read_text(),
                           signal.SIGINT)
    with pytest.raises(BuildFailed) as failure:
        build_box(repo.cluster(), "windows-1803", repo.out, console=console)
    presser.join()
    assert failure.value.results[0].status == "interrupted"
    assert "interrupted: asking Packer to cancel" in console.text
    text = log.read_text()
    assert "Cancelling build after receiving interrupt" in text and "Cleanly cancelled builds" in text
    assert list((repo.out / "boxes").glob("**/*.box")) == []


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="POSIX signals")
def test_sighup_stops_packer_and_its_plugins_and_removes_the_partial_box(repo, fake_packer, console):
    fake_packer.scenario("windows-1803", "windows-interrupted.txt", exit=1, write_box="before_wait",
                         wait_for_interrupt=True, plugin=True)
    partial = repo.out / "boxes" / ".partial" / "windows-1803-hyperv.box"

    # Handled by the runner while Packer runs.
    before = signal.signal(signal.SIGHUP, signal.SIG_DFL)  # as in a terminal (nohup would ignore it)
    sender = _signal_when(lambda: partial.is_file() and len(fake_packer.pids()) == 2, signal.SIGHUP)
    with pytest.raises(BuildFailed) as failure:
        build_box(repo.cluster(), "windows-1803", repo.out, console=console)
    sender.join()
    assert failure.value.results[0].status == "interrupted" and "(SIGHUP received)" in str(failure.value)
    assert gone_within(fake_packer.pids()) == [] and len(fake_packer.pids()) == 2
    assert list((repo.out / "boxes").glob("**/*.box")) == []
    try:
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_DFL  # the runner's handler is gone again
    finally:
        signal.signal(signal.SIGHUP, before)


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="POSIX signals")
def test_a_build_started_under_nohup_keeps_sighup_ignored():
    from k4w.bake import runner
    seen = []
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # what nohup hands its command
    try:
        with runner._forwarding_signals(seen.append):
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN  # the others still reach Packer
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, before)


def test_a_box_replaced_by_another_of_the_same_size_is_rebuilt(repo, fake_packer, console):
    cluster = repo.cluster()
    fake_packer.scenario("ubuntu-1604", "ubuntu-success.txt")
    build_box(cluster, "ubuntu-1604", repo.out, console=console)
    box = repo.out / "boxes" / "ubuntu-1604-hyperv.box"
    box.write_bytes(b"x" * box.stat().st_size)
    result = build_box(cluster, "ubuntu-1604", repo.out, console=console)
    assert result.status == "built" and len(fake_packer.builds()) == 2
    assert f"box file {box} has sha256" in console.text and "it is not the box that was built" in console.text


def test_a_crash_before_the_record_is_written_never_makes_the_next_build_skip(repo, fake_packer, console, monkeypatch):
    cluster = repo.cluster()
    fake_packer.scenario("ubuntu-1604", "ubuntu-success.txt")
    build_box(cluster, "ubuntu-1604", repo.out, console=console)
    real_write = catalogue.write_json

    def crash_on_the_record(path, data):
        if path.name.endswith(".record.json"):
            raise OSError("disk full")
        real_write(path, data)

    monkeypatch.setattr(catalogue, "write_json", crash_on_the_record)
    with pytest.raises(BuildFailed, match="disk full"):
        build_box(cluster, "ubuntu-1604", repo.out, force=True, console=console)
    monkeypatch.setattr(catalogue, "write_json", real_write)
    result = build_box(cluster, "ubuntu-1604", repo.out, console=console)
    assert result.status == "built" and "no previous build" in console.text and len(fake_packer.builds()) == 3


def test_terminal_gets_a_live_status_table(repo, fake_packer):
    terminal = Console(file=io.StringIO(), width=160, force_terminal=True, color_system=None)
    fake_packer.scenario("windows-1803", "windows-success.txt", line_delay=0.005)
    build_box(repo.cluster(), "windows-1803", repo.out, console=terminal)
    screen = terminal.file.getvalue()
    assert "\x1b[" in screen  # cursor control: the table is redrawn in place
    assert re.search(r"windows-1803\s+\d\dm\d\ds\s+4/4\s+built in", screen)
    assert "WARNING: the feature Containers needs a restart" in screen  # stderr lines scroll above it


# ------------------------------------------------------------------ the real templates
# Rendered in memory from the repository's own cluster.yml: where the box and the VM go, how
# the Windows password arrives, and that every provisioner announces itself so "step N of M"
# is right.

OUT = Path("/nonexistent/k4w-out")  # rendered in memory only


@pytest.fixture(scope="module")
def rendered() -> dict[str, str]:
    return render.render_files(Cluster.load(ROOT / "cluster.yml"), OUT, secrets_for=None)


@pytest.fixture(scope="module")
def boxes() -> list[str]:
    return config.load(ROOT / "cluster.yml").boxes()


def test_box_and_vm_go_where_the_runner_looks(rendered, boxes):
    for box in boxes:
        template = packer_hcl.parse(rendered[f"packer/{box}.pkr.hcl"], root=OUT / "packer")
        outputs = [pp.get("output") for pp in template.get("post-processors", []) if isinstance(pp, dict) and pp.get("type") == "vagrant"]
        assert outputs == [f"{OUT}/boxes/.partial/{box}-{{{{.Provider}}}}.box"], box
        for builder in template["builders"]:
            assert builder.get("output_directory") == f"{OUT}/packer-vm/{box}", box


def test_windows_password_comes_from_the_environment_only(rendered, boxes):
    for box in boxes:
        if not profiles.load(box).is_windows:
            continue
        text = rendered[f"packer/{box}.pkr.hcl"]
        template = packer_hcl.parse(text)
        variables = {k: v for k, v in template.get("variables", {}).items() if "K4W_ADMIN_PASSWORD" in v}
        assert variables and set(variables) <= set(template.get("sensitive-variables", [])), box
        assert render.PLACEHOLDER_SECRETS["admin_password"] not in text


def test_every_provisioner_announces_itself(rendered, boxes):
    for box in boxes:
        total, markers = plan_steps(packer_hcl.parse(rendered[f"packer/{box}.pkr.hcl"]))
        assert total > 0
        assert {m.step for m in markers} == set(range(1, total + 1)), f"{box}: a provisioner type the progress view cannot see"


# ------------------------------------------------------------------ real Packer and Vagrant


REAL_BUILD_TEMPLATE = """
source "null" "hyperv-iso" {
  communicator = "none"
}

build {
  sources = ["source.null.hyperv-iso"]
  provisioner "shell-local" {
    script = << (paths.guest ~ "/ubuntu/bake/base.sh") | hcl >>
  }
  provisioner "shell-local" {
    inline = [<< ("echo proxy is " ~ (proxy.http or "none")) | hcl >>]
  }
  post-processor "shell-local" {
    script           = << (paths.guest ~ "/ubuntu/bake/make-box.sh") | hcl >>
    environment_vars = [<< ("K4W_BOX_OUT=" ~ paths.boxes ~ "/.partial/" ~ box.name ~ "-libvirt.box") | hcl >>]
  }
}
"""

MAKE_BOX = """#!/usr/bin/env bash
set -euo pipefail
trap 'echo "make-box.sh: line $LINENO: $BASH_COMMAND failed" >&2' ERR
work=$(mktemp -d)
printf '{"provider": "libvirt"}' > "$work/metadata.json"
mkdir -p "$(dirname "$K4W_BOX_OUT")"
tar czf "$K4W_BOX_OUT" -C "$work" metadata.json
rm -rf "$work"
"""


@pytest.mark.tools
def test_real_packer_build_through_the_runner_then_vagrant_box_add(repo, console, tmp_path):
    """Real Packer (null builder standing in for Hyper-V) -> runner -> catalogue -> real Vagrant."""
    system_tool("packer")
    vagrant = system_tool("vagrant")
    (repo.root / "templates" / "packer" / "ubuntu.pkr.hcl.j2").write_text(REAL_BUILD_TEMPLATE)
    script = repo.root / "guest" / "ubuntu" / "bake" / "make-box.sh"
    script.write_text(MAKE_BOX)
    script.chmod(0o755)
    (repo.root / "guest" / "ubuntu" / "bake" / "base.sh").chmod(0o755)

    result = build_box(repo.cluster(proxy=PROXY), "ubuntu-1604", repo.out, console=console)
    assert result.status == "built"
    assert "provisioner 2/2: local shell" in console.text
    record = json.loads((repo.out / "boxes" / "ubuntu-1604.record.json").read_text())
    assert record["packer"] == packer_cli.version_str(packer_cli.packer_version())
    assert "guest/ubuntu/bake/make-box.sh" in record["stamp"]["inputs"]
    log = (repo.out / "logs" / "ubuntu-1604.log").read_text()
    assert "proxy is http://***@proxy.corp.example:3128" in log and PROXY_PASSWORD not in log

    env = {"VAGRANT_HOME": str(tmp_path / "vagrant-home"), "PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    add = subprocess.run([vagrant, "box", "add", str(repo.out / "boxes" / "ubuntu-1604.json")], env=env,
                         capture_output=True, text=True, timeout=300)
    assert add.returncode == 0, add.stdout + add.stderr
    assert f"Successfully added box 'k4w/ubuntu-1604' (v{record['version']}) for 'libvirt'" in add.stdout


# ------------------------------------------------------------------ the host cache comes first


def test_a_build_stages_the_boxs_verified_downloads_for_its_guest(repo, fake_packer, console):
    fake_packer.scenario("windows-1803", "windows-success.txt")
    build_box(repo.cluster(), "windows-1803", repo.out, console=console)
    staged = repo.out / "http" / "windows-1803" / "components"
    # Exactly the box's downloads, under the names the guest reads (K4W_<C>_FILE), with the cached bytes.
    assert sorted(p.name for p in staged.iterdir()) == ["docker-docker-18.09.2.zip", "kubernetes-kubernetes-node-windows-amd64.tar.gz"]
    cached = Path(os.environ["K4W_CACHE"]) / "docker" / "18.09.2" / "docker-18.09.2.zip"
    assert (staged / "docker-docker-18.09.2.zip").read_bytes() == cached.read_bytes()
    assert "fetched 0 bytes (0 files downloaded, 2 already cached)" in console.text
    assert "2 verified download(s)" in console.text and "for the build CD; the guest downloads none of them" in console.text
    # The CD takes the whole folder: a stale file from another version must not ride along.
    (staged / "stale-old.zip").write_text("x")
    fake_packer.scenario("windows-1803", "windows-success.txt")
    build_box(repo.cluster(), "windows-1803", repo.out, force=True, console=console)
    assert not (staged / "stale-old.zip").exists()


def test_a_file_the_build_cd_cannot_carry_refuses_the_windows_box_before_packer(repo, fake_packer, console, monkeypatch):
    # Packer's CD holds files below 4 GiB (build_media.CD_FILE_MAX); the limit is lowered here so the box's
    # own Docker zip stands for a Server Core archive that reaches it.
    from k4w.media import build_media

    monkeypatch.setattr(build_media, "CD_FILE_MAX", 10)
    with pytest.raises(K4wError) as refused:
        build_box(repo.cluster(), "windows-1803", repo.out, console=console)
    assert "windows-1803: the build CD cannot carry what is staged for it: docker-docker-18.09.2.zip:" in str(refused.value)
    assert "below 4 GiB" in str(refused.value)
    assert not [c for c in fake_packer.calls() if "build" in c["argv"]]  # Packer never started a build


def test_a_download_missing_from_the_cache_refuses_the_box_before_packer(repo, fake_packer, console, monkeypatch, tmp_path):
    empty = tmp_path / "empty-cache"
    monkeypatch.setenv("K4W_CACHE", str(empty))
    cluster = repo.cluster()
    # The host cannot reach the site: every download fails quickly (nothing listens on port 9).
    monkeypatch.setattr(cache, "mirror_url", lambda url, mirror: "http://127.0.0.1:9/" + url.split("/")[-1])
    with pytest.raises(BuildFailed) as failed:
        build_box(cluster, "ubuntu-1604", repo.out, console=console)
    message = str(failed.value)
    assert "ubuntu-1604: refusing to build, 1 download(s) are not in the component cache" in message
    assert "kubernetes:" in message and str(empty) in message
    assert not [c for c in fake_packer.calls() if "build" in c["argv"]]  # Packer never started a build
    assert not list(empty.rglob("*.tar.gz"))  # nothing unverified kept


RELEASE = "C:\\k\\box-release.json"


def _fetch_release_step(repo) -> None:
    """The miniature's Windows template with the real one's fetch-release download at its end."""
    template = repo.root / "templates" / "packer" / "windows.pkr.hcl.j2"
    text = template.read_text()
    last = '  post-processor "vagrant" {'
    assert last in text
    template.write_text(text.replace(last, '  provisioner "file" {\n    direction   = "download"\n'
                                     '    source      = "C:\\\\k\\\\box-release.json"\n'
                                     '    destination = << (paths.boxes ~ "/.partial/" ~ box.name ~ ".box-release.json") | hcl >>\n  }\n\n' + last))


def test_the_build_record_carries_the_patch_level_the_guest_reached(repo, fake_packer, console):
    # Windows PowerShell 5.1's Set-Content writes UTF-8 with a BOM; the guest's record as the
    # template's fetch-release download brings it back.
    guest = '\ufeff{"box": "windows-1803", "components": {"kubernetes": "1.11.10"}, "os": {"build": 17134, "ubr": 1130}}\n'
    _fetch_release_step(repo)
    fake_packer.scenario("windows-1803", "windows-success.txt", guest_files={RELEASE: guest})
    result = build_box(repo.cluster(), "windows-1803", repo.out, console=console)
    assert result.status == "built", result.message
    record = json.loads((repo.out / "boxes" / "windows-1803.record.json").read_text())
    assert record["os"] == {"build": 17134, "ubr": 1130}
    assert not (repo.out / "boxes" / ".partial").exists()  # the downloaded copy went with the partial box


def test_a_guest_record_of_another_box_fails_the_build_and_leaves_no_record(repo, fake_packer, console):
    guest = '{"box": "windows-2022", "components": {}, "os": {"build": 20348, "ubr": 5622}}'
    _fetch_release_step(repo)
    fake_packer.scenario("windows-1803", "windows-success.txt", guest_files={RELEASE: guest})
    with pytest.raises(BuildFailed):
        build_box(repo.cluster(), "windows-1803", repo.out, console=console)
    assert not (repo.out / "boxes" / "windows-1803.record.json").exists()
    assert not list((repo.out / "boxes").glob("windows-1803-*.box"))


def test_a_qemu_bake_lands_a_libvirt_box_and_its_record_says_libvirt(repo, fake_packer, console):
    """A libvirt host's template (a qemu source) makes a box the vagrant post-processor names libvirt, and
    the catalogue and the build record carry that provider, as the Hyper-V ones carry hyperv."""
    template = repo.root / "templates" / "packer" / "ubuntu.pkr.hcl.j2"
    text = template.read_text().replace('source "hyperv-iso"', 'source "qemu"').replace('"source.hyperv-iso."', '"source.qemu."')
    text = text.replace('hyperv  = { source = "github.com/hashicorp/hyperv", version = << ("= " ~ packer_plugins.hyperv) | hcl >> }',
                        'qemu    = { source = "github.com/hashicorp/qemu", version = << ("= " ~ packer_plugins.qemu) | hcl >> }')
    text = text.replace("  generation       = 2\n", "")
    assert 'source "qemu"' in text and "hyperv" not in text
    template.write_text(text)
    fake_packer.scenario("ubuntu-1604", "ubuntu-success.txt")
    result = build_box(repo.cluster(), "ubuntu-1604", repo.out, console=console)
    assert result.status == "built", console.text
    box = repo.out / "boxes" / "ubuntu-1604-libvirt.box"
    assert box.is_file() and not (repo.out / "boxes" / "ubuntu-1604-hyperv.box").exists()
    meta = json.loads((repo.out / "boxes" / "ubuntu-1604.json").read_text())
    assert [p["name"] for p in meta["versions"][0]["providers"]] == ["libvirt"]
    record = json.loads((repo.out / "boxes" / "ubuntu-1604.record.json").read_text())
    assert record["provider"] == "libvirt" and record["box_file"] == "ubuntu-1604-libvirt.box"
