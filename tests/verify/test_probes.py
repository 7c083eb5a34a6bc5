"""Probes: an HTTP answer of any status is reachable, no answer is PathUnreachable, and a probe
that could not run is ProbeBroken (which no expected-failure row may swallow)."""

from __future__ import annotations

import http.server
import os
import subprocess
import threading

import pytest

from k4w.verify import probes


def _run_linux_script(tmp_path, script: str, wget: str, nslookup: str = "exit 0") -> subprocess.CompletedProcess:
    """The pod's shell script under a real POSIX sh, with busybox's wget/nslookup stood in for."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in (("wget", wget), ("nslookup", nslookup)):
        tool = bin_dir / name
        tool.write_text(f"#!/bin/sh\n{body}\n")
        tool.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env, check=True)


@pytest.mark.parametrize("wget, answered, detail", [
    ("exit 0", True, "HTTP answer"),
    # busybox 1.28's messages (networking/wget.c)
    ("echo 'wget: server returned error: HTTP/1.1 404 Not Found' >&2; exit 1", True, "404 Not Found"),
    ("echo 'wget: can'\\''t connect to remote host (10.244.1.5): Connection refused' >&2; exit 1", False, "Connection refused"),
    ("echo 'wget: download timed out' >&2; exit 1", False, "timed out"),
])
def test_linux_probe_reads_what_wget_says(tmp_path, wget, answered, detail):
    proc = _run_linux_script(tmp_path, probes.linux_script("http://10.244.1.5:80/", None), wget)
    ok, text = probes.parse_linux(proc.stdout, proc.stderr, "probe")
    assert ok is answered and detail in text


def test_linux_probe_by_name_stops_at_a_failed_lookup(tmp_path):
    script = probes.linux_script("http://linux-web.k4w-test.svc.cluster.local:80/", "linux-web.k4w-test.svc.cluster.local")
    proc = _run_linux_script(tmp_path, script, "echo wget-ran; exit 0",
                             nslookup="echo \"nslookup: can't resolve '$1'\"; exit 1")
    ok, text = probes.parse_linux(proc.stdout, proc.stderr, "probe")
    assert not ok and text.startswith("DNS name did not resolve") and "linux-web.k4w-test" in text
    assert "wget-ran" not in proc.stdout


def test_linux_probe_without_its_marker_is_broken_not_unreachable():
    with pytest.raises(probes.ProbeBroken, match="did not run"):
        probes.parse_linux("", 'error: unable to upgrade connection: container not found ("linux-client")', "probe")
    assert not issubclass(probes.ProbeBroken, AssertionError)


def test_windows_probe_output():
    assert probes.parse_windows('{"ok":true,"detail":"HTTP 200"}', "", 0, "p") == (True, "HTTP 200")
    assert probes.parse_windows('{"ok":false,"detail":"Unable to connect"}', "", 0, "p") == (False, "Unable to connect")
    with pytest.raises(probes.ProbeBroken):
        probes.parse_windows("", "Error from server (NotFound): pods \"win-client\" not found", 1, "p")
    with pytest.raises(probes.ProbeBroken):
        probes.parse_windows('"just a string"', "", 0, "p")


def test_windows_probe_is_an_encoded_powershell_command():
    argv = probes.windows_argv("http://10.244.1.5/", None)
    assert argv[0] == "powershell.exe" and argv[-2] == "-EncodedCommand"


@pytest.fixture
def http_server():
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(404 if self.path == "/missing" else 200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_probe_from_here_counts_any_http_status_and_ignores_proxy_settings(http_server, monkeypatch):
    # A corporate proxy in the environment must not carry the probe: the path itself is tested.
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    assert probes.from_here(http_server + "/") == (True, "HTTP 200")
    assert probes.from_here(http_server + "/missing") == (True, "HTTP 404")


def test_probe_from_here_to_a_closed_port_is_no_answer(closed_port):
    ok, detail = probes.from_here(f"http://127.0.0.1:{closed_port}/", timeout=2)
    assert not ok and "refused" in detail.lower()


def test_until_answered_retries_until_the_deadline_then_names_the_path():
    now = [0.0]
    attempts = []

    def probe():
        attempts.append(now[0])
        return False, "Connection refused"

    def sleep(seconds):
        now[0] += seconds

    with pytest.raises(probes.PathUnreachable, match=r"linux-pod->win-pod:ip: no answer after \d+ attempts in 10 s: Connection refused"):
        probes.until_answered(probe, "linux-pod->win-pod:ip", deadline=10, clock=lambda: now[0], sleep=sleep)
    assert len(attempts) > 1 and now[0] >= 10


def test_until_answered_returns_on_the_first_answer():
    answers = iter([(False, "refused"), (True, "HTTP 200")])
    assert probes.until_answered(lambda: next(answers), "p", deadline=10, clock=lambda: 0, sleep=lambda s: None) == "HTTP 200"


def test_tcp_probe_from_a_linux_pod_reads_what_nc_says():
    assert probes.parse_linux_tcp(f"{probes.MARKER}=tcp rc=0\n", "", "p") == (True, "TCP connection established")
    refused = f"{probes.MARKER}=tcp rc=1\nnc: can't connect to remote host (192.168.250.21): Connection refused\n"
    assert probes.parse_linux_tcp(refused, "", "p") == (False, "nc: can't connect to remote host (192.168.250.21): Connection refused")
    # an nc without -z prints its usage: the probe is broken, never "closed"
    with pytest.raises(probes.ProbeBroken):
        probes.parse_linux_tcp(f"{probes.MARKER}=tcp rc=1\nBusyBox v1.28.4 multi-call binary.\n\nUsage: nc [OPTIONS] HOST PORT", "", "p")


def test_linux_tcp_probe_really_tells_an_open_port_from_a_closed_one(tmp_path, closed_port):
    """The script itself, run by a real shell with a stand-in nc that connects like netcat -z."""
    import socket
    import subprocess
    import sys

    fake_nc = tmp_path / "nc"
    fake_nc.write_text(f"""#!{sys.executable}
import socket, sys
args = sys.argv[1:]
host, port = args[-2], int(args[-1])
try:
    socket.create_connection((host, port), timeout=float(args[args.index('-w') + 1])).close()
except OSError as exc:
    print(f"nc: can't connect to remote host ({{host}}): {{exc}}", file=sys.stderr)
    sys.exit(1)
""")
    fake_nc.chmod(0o755)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}
    try:
        for port, want in ((listener.getsockname()[1], True), (closed_port, False)):
            proc = subprocess.run(["sh", "-c", probes.linux_tcp_script("127.0.0.1", port, timeout=2)],
                                  capture_output=True, text=True, env=env, timeout=30)
            assert probes.parse_linux_tcp(proc.stdout, proc.stderr, "p")[0] is want, proc.stdout
    finally:
        listener.close()


def test_a_closed_path_fails_the_moment_one_attempt_connects():
    answers = iter([(False, "refused"), (True, "TCP connection established"), (False, "refused")])
    with pytest.raises(probes.PathOpen, match="linux-pod->win-node:winrm-http.*connected.*must be closed"):
        probes.never_connects(lambda: next(answers), "linux-pod->win-node:winrm-http")


def test_a_closed_path_passes_only_after_every_attempt_was_refused():
    calls = []
    detail = probes.never_connects(lambda: calls.append(1) or (False, "timed out"), "row", attempts=3)
    assert (len(calls), detail) == (3, "timed out")
