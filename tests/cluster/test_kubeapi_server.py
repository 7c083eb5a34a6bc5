"""k4w's API client against an HTTPS server on 127.0.0.1 that misbehaves: each request has one deadline
for the whole of it (a server that trickles bytes cannot hold cluster-up), a redirect or a web page is
refused naming the request (a POST answered 302 is never taken as created), and a TLS setup that
cannot work names the kubeconfig and its field, without OpenSSL ever asking for a pass phrase."""

from __future__ import annotations

import base64
import subprocess
import sys
import time

import pytest

from k4w.infra.errors import K4wError
from k4w.cluster.kubeapi import ApiError, Client, load_kubeconfig
from tests.fakes import api_server

DEADLINE_S = 1.0


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return api_server.certificates(tmp_path_factory.mktemp("api-certs"))


def status(handler, code: int, body: bytes, headers: dict) -> None:
    handler.send_response(code)
    for name, value in headers.items():
        handler.send_header(name, value)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)
    handler.wfile.flush()


def json_answer(handler, state) -> None:
    status(handler, 200, b'{"kind": "Namespace", "metadata": {"name": "default"}}', {"Content-Type": "application/json"})


def trickle_headers(handler, state) -> None:
    """A status line, then one byte of a header every 0.1 s for as long as the test runs."""
    handler.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
    handler.wfile.flush()
    while not state.stop.wait(0.1):
        handler.wfile.write(b"a")
        handler.wfile.flush()


def trickle_body(handler, state) -> None:
    handler.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
    handler.wfile.flush()
    while not state.stop.wait(0.1):
        handler.wfile.write(b" ")
        handler.wfile.flush()


def test_a_well_behaved_server_answers_within_the_deadline(certs, tmp_path):
    with api_server.serve(certs, json_answer) as server:
        api = Client(load_kubeconfig(api_server.kubeconfig(tmp_path, server)), deadline_s=DEADLINE_S)
        assert api.get("/api/v1/namespaces/default")["metadata"]["name"] == "default"


@pytest.mark.parametrize("answer", [trickle_headers, trickle_body], ids=["headers", "body"])
def test_a_server_that_trickles_bytes_is_given_up_on_at_the_deadline(certs, tmp_path, answer):
    """Each byte comes long before the per-read timeout, so only a deadline for the whole request ends it."""
    with api_server.serve(certs, answer) as server:
        api = Client(load_kubeconfig(api_server.kubeconfig(tmp_path, server)), deadline_s=DEADLINE_S)
        started = time.monotonic()
        with pytest.raises(ApiError) as refused:
            api.get("/api/v1/nodes")
        took = time.monotonic() - started
    assert f"GET {server.url}/api/v1/nodes: no complete answer within 1 s (the limit for a whole request)" in str(refused.value)
    assert took < DEADLINE_S + 1.5, took


def redirect(handler, state) -> None:
    status(handler, 302, b"", {"Location": "https://login.corp.example/sso?next=/api"})


def web_page(handler, state) -> None:
    status(handler, 200, b"<html><body>Please log in</body></html>", {"Content-Type": "text/html; charset=utf-8"})


def json_list_not_object(handler, state) -> None:
    status(handler, 200, b"[]", {"Content-Type": "application/json"})


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_redirect_is_refused_and_a_post_answered_302_is_not_taken_as_created(certs, tmp_path, method):
    with api_server.serve(certs, redirect) as server:
        api = Client(load_kubeconfig(api_server.kubeconfig(tmp_path, server)), deadline_s=DEADLINE_S)
        with pytest.raises(ApiError) as refused:
            if method == "POST":
                api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}})
            else:
                api.get("/version")
    path = "/api/v1/namespaces" if method == "POST" else "/version"
    assert (f"{method} {server.url}{path}: HTTP 302 redirect to 'https://login.corp.example/sso?next=/api'; "
            "k4w does not follow redirects") in str(refused.value)
    assert refused.value.status == 302
    assert [r["path"] for r in server.requests] == [path]   # asked once, never followed


@pytest.mark.parametrize("answer, media", [(web_page, "text/html; charset=utf-8"), (json_list_not_object, "application/json")],
                         ids=["html", "json-list"])
def test_an_answer_that_is_no_json_object_is_refused_naming_the_request(certs, tmp_path, answer, media):
    with api_server.serve(certs, answer) as server:
        api = Client(load_kubeconfig(api_server.kubeconfig(tmp_path, server)), deadline_s=DEADLINE_S)
        with pytest.raises(ApiError) as refused:
            api.get("/version")
    assert f"GET {server.url}/version: HTTP 200 answered {media!r} with no JSON object" in str(refused.value)


# TLS set-ups that cannot work: each names the kubeconfig and the field to fix.

def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def client_pair(tmp_path_factory):
    folder = tmp_path_factory.mktemp("client-certs")
    for name in ("a", "b"):
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(folder / f"{name}.key"),
                "-out", str(folder / f"{name}.crt"), "-days", "2", "-subj", f"/CN={name}")
    openssl("pkey", "-in", str(folder / "a.key"), "-aes256", "-passout", "pass:secret", "-out", str(folder / "a-encrypted.key"))
    return folder


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_a_ca_that_is_no_certificate_names_the_field(certs, tmp_path):
    with api_server.serve(certs, json_answer) as server:
        server.ca_pem = b"this is not a certificate\n"
        path = api_server.kubeconfig(tmp_path, server)
        with pytest.raises(K4wError) as refused:
            Client(load_kubeconfig(path))
    assert f"the certificate-authority-data of {path} holds no PEM CA certificate k4w can use" in str(refused.value)


def test_a_key_that_is_not_the_certificates_names_both_fields(certs, client_pair, tmp_path):
    key = tmp_path / "b.key"
    key.write_bytes((client_pair / "b.key").read_bytes())
    key.chmod(0o600)
    with api_server.serve(certs, json_answer) as server:
        path = api_server.kubeconfig(tmp_path, server, user={
            "client-certificate-data": b64((client_pair / "a.crt").read_bytes()), "client-key": str(key)})
        with pytest.raises(K4wError) as refused:
            Client(load_kubeconfig(path))
    assert (f"the client-key {key} (named in {path}) is not the key of the client-certificate-data of {path}"
            in str(refused.value))


def test_an_encrypted_client_key_is_refused_without_a_pass_phrase_prompt(certs, client_pair, tmp_path):
    """In a child with a terminal of its own would OpenSSL's prompt wait; here it must not even be
    asked: the child has no stdin, and the refusal comes at once."""
    with api_server.serve(certs, json_answer) as server:
        path = api_server.kubeconfig(tmp_path, server, user={
            "client-certificate-data": b64((client_pair / "a.crt").read_bytes()),
            "client-key-data": b64((client_pair / "a-encrypted.key").read_bytes())})
        child = subprocess.run(
            [sys.executable, "-c", "import sys; from k4w.cluster.kubeapi import Client, load_kubeconfig\n"
             "try:\n    Client(load_kubeconfig(sys.argv[1]))\nexcept Exception as exc:\n    print(exc)\n", str(path)],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
    assert (f"the client-key-data of {path} is encrypted with a pass phrase; k4w never asks for one" in child.stdout), \
        child.stdout + child.stderr
    assert "pass phrase:" not in child.stderr.lower() and "PEM pass phrase" not in child.stdout + child.stderr

