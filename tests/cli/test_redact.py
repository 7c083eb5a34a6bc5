"""Proxy credentials and generated passwords never reach the screen or a log."""

import json

import pytest

from k4w.redact import redact, register_secret
from tests.helpers import config_dict, invoke, write_config

PASSWORD = "S3cr3tPa55"
PROXY = f"http://alice:{PASSWORD}@proxy.corp.example:3128"


def test_redact_hides_url_credentials_and_registered_secrets():
    register_secret("generated-Xyz123")
    text = f"proxy {PROXY} and https://bob@h:1 and pw generated-Xyz123"
    out = redact(text)
    assert PASSWORD not in out and "alice" not in out and "bob@" not in out and "generated-Xyz123" not in out
    assert "http://***@proxy.corp.example:3128" in out


@pytest.mark.parametrize("line", [
    "Proxy-Authorization: Basic YWxpY2U6UzNjcjN0UGE1NQ==",
    "    hyperv-iso: > proxy-authorization: basic YWxpY2U6UzNjcjN0UGE1NQ==",
    "Authorization: Bearer eyJhbGciOi.payload.sig",
    'header "Proxy-Authorization: NTLM TlRMTVNTUAADAAAAGAAYAHA="',
])
def test_redact_hides_http_credential_headers(line):
    out = redact(line)
    assert "YWxpY2U6UzNjcjN0UGE1NQ==" not in out and "eyJhbGciOi" not in out and "TlRMTVNT" not in out
    assert "***" in out and "uthorization" in out


@pytest.fixture()
def proxy_config(tmp_path):
    return write_config(tmp_path / "cluster.yml", config_dict(**{"proxy.http": PROXY, "proxy.https": PROXY}))


@pytest.mark.parametrize("task", ["plan", "render", "doctor", "validate"])
def test_tasks_never_print_proxy_credentials(task, proxy_config, tmp_path):
    result = invoke(task, "--config", str(proxy_config), "--out", str(tmp_path / "out"))
    output = result.stdout + result.stderr
    assert "proxy.corp.example" in output or task in ("render", "validate"), output  # the proxy is shown, just not its secret
    assert PASSWORD not in output
    assert "alice" not in output


def test_plan_shows_the_redacted_proxy(proxy_config, tmp_path):
    result = invoke("plan", "--config", str(proxy_config), "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    assert "http://***@proxy.corp.example:3128" in result.stdout


def test_windows_admin_password_is_kept_out_of_the_packer_template(proxy_config, tmp_path):
    out = tmp_path / "out"
    assert invoke("render", "--config", str(proxy_config), "--out", str(out)).returncode == 0
    secret = json.loads((out / "secrets" / "windows-1803.json").read_text())["admin_password"]
    assert (out / "secrets" / "windows-1803.json").stat().st_mode & 0o077 == 0
    for path in (out / "packer").glob("*.json"):
        assert secret not in path.read_text()
