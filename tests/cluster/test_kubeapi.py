"""The admin kubeconfig of cluster.existing: what k4w refuses to use, each with the reason a user can act on."""

from __future__ import annotations

import base64

import pytest
import yaml

from k4w.errors import K4wError
from k4w.kubeapi import load_kubeconfig
from k4w.redact import redact

CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n").decode()


def kubeconfig(tmp_path, cluster=None, user=None, mode=0o600):
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": "admin@k",
           "contexts": [{"name": "admin@k", "context": {"cluster": "k", "user": "admin"}}],
           "clusters": [{"name": "k", "cluster": {"server": "https://10.0.0.5:6443", "certificate-authority-data": CA, **(cluster or {})}}],
           "users": [{"name": "admin", "user": user if user is not None else {"token": "abcdef.0123456789abcdef"}}]}
    path = tmp_path / "admin.conf"
    path.write_text(yaml.safe_dump(doc))
    path.chmod(mode)
    return path


def test_a_usable_kubeconfig_gives_the_server_and_keeps_its_token_out_of_every_message(tmp_path):
    creds = load_kubeconfig(kubeconfig(tmp_path))
    assert creds.server == "https://10.0.0.5:6443" and creds.host_port == "10.0.0.5:6443"
    assert "abcdef.0123456789abcdef" not in redact("token abcdef.0123456789abcdef")


@pytest.mark.parametrize("cluster, user, mode, message", [
    ({}, None, 0o640, "is readable by other accounts (mode 0640); run: chmod 600"),
    ({"insecure-skip-tls-verify": True}, None, 0o600, "skips TLS verification"),
    ({"server": "http://10.0.0.5:8080"}, None, 0o600, "k4w talks to an API server over https only"),
    ({"certificate-authority-data": None}, None, 0o600, "names no certificate-authority"),
    ({}, {"exec": {"command": "aws"}}, 0o600, "gets its credentials from an exec plugin"),
    ({}, {}, 0o600, "has no client certificate and key and no token"),
])
def test_what_k4w_refuses(tmp_path, cluster, user, mode, message):
    with pytest.raises(K4wError) as refused:
        load_kubeconfig(kubeconfig(tmp_path, cluster, user, mode))
    assert message in str(refused.value)


def test_a_missing_or_foreign_file(tmp_path):
    with pytest.raises(K4wError, match="does not exist"):
        load_kubeconfig(tmp_path / "nope.conf")
    other = tmp_path / "other.yml"
    other.write_text("nodes: []\n")
    other.chmod(0o600)
    with pytest.raises(K4wError, match="is not a kubeconfig"):
        load_kubeconfig(other)
