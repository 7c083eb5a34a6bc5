"""Host discovery: Vagrant's connection settings become testinfra host URLs OpenSSH accepts."""

from __future__ import annotations

import subprocess
import urllib.parse
from pathlib import Path

import pytest
import testinfra

from k4w.infra.errors import K4wError
from k4w.verify import discovery
from tests.helpers import system_tool

from tests.fakes.vagrant import OUTPUTS as RECORDED
from tests.helpers import system_tool


def _ssh_resolve(config: Path, alias: str) -> dict[str, str]:
    """What the real OpenSSH client makes of a config file for a host (`ssh -G`, no connection)."""
    ssh = system_tool("ssh")
    proc = subprocess.run([ssh, "-G", "-F", str(config), alias], capture_output=True, text=True, check=True)
    out: dict[str, str] = {}
    for line in proc.stdout.splitlines():
        key, _, value = line.partition(" ")
        out.setdefault(key, value)
    return out


def test_cluster_ssh_config_gives_one_host_per_machine():
    hosts = discovery.parse_ssh_config((RECORDED / "vagrant-ssh-config-cluster.txt").read_text())
    assert [(h.alias, h.hostname, h.port, h.user) for h in hosts] == [
        ("master", "172.25.112.34", 22, "vagrant"),
        ("worker-linux", "172.25.117.201", 22, "vagrant"),
    ]
    assert hosts[0].identity_files == ("C:/Users/Jane Doe/k4w/build/vagrant-state/machines/master/hyperv/private_key",)
    assert [h.url() for h in hosts] == ["ssh://master", "ssh://worker-linux"]


@pytest.mark.parametrize("recorded, alias, hostname", [
    ("vagrant-ssh-config-cluster.txt", "worker-linux", "172.25.117.201"),
    ("vagrant-ssh-config-testbox.txt", "default", "172.25.126.9"),
])
def test_openssh_resolves_the_url_alias_through_the_recorded_config(recorded, alias, hostname):
    # testinfra runs `ssh -F <file> <alias>`: the alias must resolve to the VM, as Vagrant meant.
    resolved = _ssh_resolve(RECORDED / recorded, alias)
    assert (resolved["hostname"], resolved["port"], resolved["user"]) == (hostname, "22", "vagrant")
    assert resolved["stricthostkeychecking"] == "false"


def test_winrm_config_gives_an_ntlm_http_url():
    [host] = discovery.parse_winrm_config((RECORDED / "vagrant-winrm-config.txt").read_text())
    assert (host.alias, host.hostname, host.port, host.user) == ("worker-win", "172.25.120.7", 5985, "vagrant")
    assert host.url() == "winrm://vagrant:vagrant@172.25.120.7:5985?no_ssl=true"
    backend = testinfra.get_host(host.url()).backend
    assert backend.conn_args["endpoint"] == "http://172.25.120.7:5985/wsman"
    assert (backend.conn_args["username"], backend.conn_args["password"]) == ("vagrant", "vagrant")


def test_winrm_password_with_url_characters_survives_and_https_port_uses_tls():
    text = "Host w\n  HostName 10.0.0.5\n  User admin\n  Password p@ss:w/rd?#%\n  Port 5986\n"
    [host] = discovery.parse_winrm_config(text)
    backend = testinfra.get_host(host.url()).backend
    assert backend.conn_args["password"] == "p@ss:w/rd?#%"
    assert backend.conn_args["endpoint"] == "https://10.0.0.5:5986/wsman"
    assert backend.conn_args["server_cert_validation"] == "ignore"
    assert "p@ss" not in repr(host)


def test_winrm_url_password_is_redacted_in_printed_commands():
    from k4w.infra.redact import redact

    url = discovery.WinrmHost("w", "10.0.0.5", 5985, "vagrant", "s3cr3t").url()
    assert "s3cr3t" not in redact(f"pytest --hosts={url}")


def test_output_that_is_not_vagrants_is_refused():
    with pytest.raises(K4wError, match="before any 'Host' line"):
        discovery.parse_ssh_config("The provider 'hyperv' could not be found\nHost x\n  HostName y\n  User z\n")
    with pytest.raises(K4wError, match="no 'Host' block"):
        discovery.parse_winrm_config("")
    with pytest.raises(K4wError, match="has no 'password' line"):
        discovery.parse_winrm_config("Host w\n  HostName h\n  User u\n  Port 5985\n")


def test_ssh_target_config_is_what_openssh_resolves(tmp_path):
    key = tmp_path / "id_ed25519"
    key.write_text("not a real key\n")
    config = tmp_path / "ssh-config"
    config.write_text(discovery.ssh_target_config("k4w-target", "127.0.0.1", 2222, "vagrant", key))
    resolved = _ssh_resolve(config, "k4w-target")
    assert (resolved["hostname"], resolved["port"], resolved["user"]) == ("127.0.0.1", "2222", "vagrant")
    assert resolved["identityfile"] == str(key)
    assert resolved["userknownhostsfile"] == "/dev/null"
    [parsed] = discovery.parse_ssh_config(config.read_text())
    assert urllib.parse.urlsplit(parsed.url()).hostname == "k4w-target"
