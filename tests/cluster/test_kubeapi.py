"""The admin kubeconfig of cluster.existing: what k4w refuses to use, each with the reason a user can act on."""

from __future__ import annotations

import base64

import pytest
import yaml

from k4w.infra.errors import K4wError
from k4w.cluster.kubeapi import load_kubeconfig
from k4w.infra.redact import redact

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


def test_several_contexts_and_no_current_context_names_them_and_the_command(tmp_path):
    path = kubeconfig(tmp_path)
    doc = yaml.safe_load(path.read_text())
    del doc["current-context"]
    doc["contexts"].append({"name": "other@k", "context": {"cluster": "k", "user": "admin"}})
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(K4wError) as refused:
        load_kubeconfig(path)
    assert (f"{path} has no current-context, so k4w cannot tell which cluster to join (its contexts: 'admin@k', "
            f"'other@k'); run: kubectl config use-context NAME --kubeconfig {path}") == str(refused.value).removeprefix("cluster.existing: ")


@pytest.mark.parametrize("key, what", [("client-key", "client key"), ("tokenFile", "token")])
def test_a_key_or_token_file_others_can_read_is_refused(tmp_path, key, what):
    """The kubeconfig is private, and so must be the credential files it names."""
    secret = tmp_path / "secret"
    secret.write_text("abcdef.0123456789abcdef\n" if key == "tokenFile" else "-----BEGIN PRIVATE KEY-----\n")
    secret.chmod(0o644)
    user = {key: str(secret)} if key == "tokenFile" else {"client-certificate-data": CA, key: str(secret)}
    path = kubeconfig(tmp_path, user=user)
    with pytest.raises(K4wError) as refused:
        load_kubeconfig(path)
    assert f"{secret} holds the {what} of {path} but is readable by other accounts (mode 0644); run: chmod 600 {secret}" \
        in str(refused.value)
    secret.chmod(0o600)
    load_kubeconfig(path)   # private, it is used


# `icacls FILE` as Windows prints it (icacls /?): the path, then one entry a line, a blank line and a summary.
LISTING = """{path} NT AUTHORITY\\SYSTEM:(F)
{pad} BUILTIN\\Administrators:(F)
{pad} WORKSTATION\\alice:(F)
{extra}
Successfully processed 1 files; Failed processing 0 files
"""

FAKE_ICACLS = """#!{python}
import json, os, sys
with open({calls!r}, "a") as fh:
    fh.write(json.dumps(sys.argv[1:]) + "\\n")
extra = os.environ.get("FAKE_ICACLS_EXTRA", "")
if os.environ.get("FAKE_ICACLS_GARBLED"):
    print("something else entirely")
else:
    print({listing!r}.format(path=sys.argv[1], pad=" " * len(sys.argv[1]), extra=(" " * len(sys.argv[1]) + " " + extra + "\\n") if extra else ""))
"""


@pytest.fixture
def icacls(tmp_path, monkeypatch):
    """A stand-in icacls first on PATH that lists an ACL (what FAKE_ICACLS_EXTRA adds to the owner's), and the
    Windows ACL branch of k4w.outdir.private switched on, as tests/outdir/test_private_files.py does for writes."""
    import os
    import sys

    from k4w.outdir import private

    bin_dir, calls = tmp_path / "bin", tmp_path / "icacls-calls.jsonl"
    bin_dir.mkdir()
    fake = bin_dir / "icacls"
    fake.write_text(FAKE_ICACLS.format(python=sys.executable, calls=str(calls), listing=LISTING))
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv(private.WINDOWS_ACL_TEST_ENV, "1")
    monkeypatch.setenv("USERNAME", "alice")
    monkeypatch.setenv("USERDOMAIN", "WORKSTATION")
    return monkeypatch, calls


def test_on_windows_the_kubeconfig_and_key_acls_are_read_and_the_owners_own_is_accepted(tmp_path, icacls):
    import json

    monkeypatch, calls = icacls
    key = tmp_path / "client.key"
    key.write_text("-----BEGIN PRIVATE KEY-----\n")
    key.chmod(0o600)
    path = kubeconfig(tmp_path, user={"client-certificate-data": CA, "client-key": str(key)})
    load_kubeconfig(path)
    assert [json.loads(line) for line in calls.read_text().splitlines()] == [[str(path)], [str(key)]]
    monkeypatch.setenv("FAKE_ICACLS_EXTRA", "Everyone:(DENY)(W)")   # a deny lets no one in
    load_kubeconfig(path)


@pytest.mark.parametrize("entry", ["BUILTIN\\Users:(I)(RX)", "Everyone:(R)", "CORP\\bob:(M)", "NT AUTHORITY\\Authenticated Users:(I)(RD)"])
def test_on_windows_a_kubeconfig_others_can_read_is_refused_naming_the_entry_and_the_fix(tmp_path, icacls, entry):
    monkeypatch, _ = icacls
    monkeypatch.setenv("FAKE_ICACLS_EXTRA", entry)
    path = kubeconfig(tmp_path)
    with pytest.raises(K4wError) as refused:
        load_kubeconfig(path)
    assert (f"{path} holds cluster-admin credentials but is readable by other accounts ({entry}); run: "
            f'icacls {path} /inheritance:r /grant:r "WORKSTATION\\alice:(F)" "*S-1-5-18:(F)"') == str(refused.value)


def test_on_windows_an_acl_listing_k4w_cannot_read_refuses_rather_than_passes(tmp_path, icacls):
    monkeypatch, _ = icacls
    monkeypatch.setenv("FAKE_ICACLS_GARBLED", "1")
    with pytest.raises(K4wError, match="icacls did not list this file's access rights"):
        load_kubeconfig(kubeconfig(tmp_path))
