"""`invoke pin` through the real CLI: download through cluster.yml's proxy, record, and every
command that would build says exactly which pin is missing."""

from __future__ import annotations

import hashlib
import shutil

import yaml

from k4w.infra import sources
from k4w.infra.sources import REPO_ROOT as ROOT
from tests.fakes import local_http
from tests.helpers import config_dict, invoke, write_config

BODY = b"MZ flanneld.exe stand-in " * 4000


def _boxes_with_flannel_at(tmp_path, url: str):
    folder = tmp_path / "boxes"
    shutil.copytree(ROOT / "boxes", folder)
    data = yaml.safe_load((folder / "windows-1803.yml").read_text())
    data["components"]["flannel"]["url"] = url
    (folder / "windows-1803.yml").write_text(yaml.safe_dump(data, sort_keys=False))
    return {sources.BOX_DIRS_ENV: str(folder)}


def test_pin_downloads_through_the_proxy_and_records_next_to_the_config(tmp_path):
    # The site is on 127.0.0.2: k4w's NO_PROXY holds 127.0.0.1 (and the cluster's ranges), not it.
    with local_http.site({"/flanneld.exe": BODY}, host="127.0.0.2") as site, local_http.proxy("alice", "S3cret") as proxy:
        config = write_config(tmp_path / "cluster.yml", config_dict(**{"proxy.http": proxy.url}))
        env = _boxes_with_flannel_at(tmp_path, f"{site.url}/flanneld.exe")
        first = invoke("pin", "windows-1803", "flannel", "--config", str(config), env=env)
        again = invoke("pin", "windows-1803", "flannel", "--config", str(config), env=env)
    assert first.returncode == 0, first.stderr
    digest = hashlib.sha256(BODY).hexdigest()
    assert f"sha256  {digest}" in first.stdout and f"size    {len(BODY)} bytes" in first.stdout
    assert "S3cret" not in first.stdout + first.stderr
    assert proxy.requests and all(r["authorized"] for r in proxy.requests)
    recorded = yaml.safe_load((tmp_path / "k4w-pins.yml").read_text())["windows-1803"]["flannel"]
    assert recorded["sha256"] == digest and recorded["size"] == len(BODY)
    assert again.returncode == 0 and "already pinned with this sha256; unchanged" in again.stdout


def test_missing_pin_is_named_with_the_exact_command_by_plan_doctor_and_the_dry_run(tmp_path):
    config = write_config(tmp_path / "cluster.yml", config_dict())
    out = str(tmp_path / "out")
    command = f"invoke pin windows-1803 flannel --config {config}"
    plan = invoke("plan", "--config", str(config), "--out", out)
    doctor = invoke("doctor", "--config", str(config), "--out", out)
    dry = invoke("build-windows", "--dry-run", "--config", str(config), "--out", out)
    assert command in plan.stdout
    assert command in doctor.stdout
    assert dry.returncode != 0 and command in dry.stdout + dry.stderr


def test_a_pin_reaches_the_guest_step_variables(tmp_path):
    with local_http.site({"/flanneld.exe": BODY}) as site:
        config = write_config(tmp_path / "cluster.yml", config_dict())
        env = _boxes_with_flannel_at(tmp_path, f"{site.url}/flanneld.exe")
        assert invoke("pin", "windows-1803", "flannel", "--config", str(config), env=env).returncode == 0
        rendered = invoke("render", "--config", str(config), "--out", str(tmp_path / "out"), env=env)
    assert rendered.returncode == 0, rendered.stderr
    template = (tmp_path / "out" / "packer" / "windows-1803.pkr.hcl").read_text()
    assert f"K4W_FLANNEL_SHA256={hashlib.sha256(BODY).hexdigest()}" in template
