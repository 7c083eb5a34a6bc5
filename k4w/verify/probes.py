"""Probes for the connectivity matrix: "can SOURCE get an HTTP answer from URL?".

Any HTTP answer counts (a 404 or a proxy's 400 still proves the path); only "no answer"
(refused, timed out, DNS failure) is PathUnreachable. A probe that could not even run
(kubectl exec failed, pod gone, script error) raises ProbeBroken instead, so an
expected-failure row can never hide a broken test setup: the matrix marks expected failures
with `xfail(raises=PathUnreachable)`.
"""

from __future__ import annotations

import shlex
import socket
import time
import urllib.error
import urllib.request

from ..render.escape import ps
from k4w.infra.redact import redact
from . import winps

PER_TRY_SECONDS = 10  # one HTTP attempt
DEADLINE_SECONDS = 45  # keep trying this long: the first packets after a pod starts can be lost on HNS
MARKER = "k4w-probe"


class PathUnreachable(AssertionError):
    """The probe ran and the target gave no answer."""


class ProbeBroken(RuntimeError):
    """The probe could not run; this is a failure of the check itself, never an expected one."""


# ------------------------------------------------------------------ scripts run inside pods


def linux_script(url: str, dns_name: str | None, timeout: int = PER_TRY_SECONDS) -> str:
    """busybox sh: resolve (when by name), then fetch; print a marker line the parser reads."""
    lines = []
    if dns_name:
        # busybox 1.28 nslookup exits non-zero when the name does not resolve.
        lines.append(
            f"if ! out=$(nslookup {shlex.quote(dns_name)} 2>&1); then "
            f'echo "{MARKER}=dns-failed"; echo "$out"; exit 0; fi'
        )
    lines.append(f"out=$(wget -q -T {int(timeout)} -O /dev/null {shlex.quote(url)} 2>&1)")
    lines.append(f'echo "{MARKER}=http rc=$?"; echo "$out"')
    return "\n".join(lines)


def parse_linux(stdout: str, stderr: str, what: str) -> tuple[bool, str]:
    text = stdout.strip()
    if f"{MARKER}=dns-failed" in text:
        return False, "DNS name did not resolve: " + text.split("\n", 1)[-1].strip()
    if f"{MARKER}=http rc=" not in text:
        raise ProbeBroken(redact(f"{what}: the probe did not run: {stderr.strip() or text}"))
    marker, _, detail = text.partition("\n")
    if marker.endswith("rc=0"):
        return True, "HTTP answer"
    # busybox wget: "server returned error: HTTP/1.1 404 Not Found" is an answer too.
    if "server returned error" in detail:
        return True, detail.strip()
    return False, detail.strip() or marker


def windows_body(url: str, dns_name: str | None, timeout: int = PER_TRY_SECONDS) -> str:
    """PowerShell 5.1 block (for winps.wrap): resolve, then Invoke-WebRequest; returns {ok, detail}."""
    name = ps(dns_name) if dns_name else "$null"
    return f"""$url = {ps(url)}
$name = {name}
if ($name) {{
  try {{ $null = Resolve-DnsName -Name $name -Type A -DnsOnly -ErrorAction Stop }}
  catch {{ return @{{ ok = $false; detail = 'DNS name did not resolve: ' + $_.Exception.Message }} }}
}}
try {{
  $r = Invoke-WebRequest -Uri $url -UseBasicParsing -TimeoutSec {int(timeout)}
  @{{ ok = $true; detail = 'HTTP ' + $r.StatusCode }}
}} catch [System.Net.WebException] {{
  if ($_.Exception.Response) {{ @{{ ok = $true; detail = 'HTTP ' + [int]$_.Exception.Response.StatusCode }} }}
  else {{ @{{ ok = $false; detail = $_.Exception.Message }} }}
}}"""


def windows_argv(url: str, dns_name: str | None) -> list[str]:
    return winps.command_line(windows_body(url, dns_name)).split(" ")


def parse_windows(stdout: str, stderr: str, rc: int, what: str) -> tuple[bool, str]:
    try:
        data = winps.parse_output(stdout, stderr, rc, what)
    except winps.PowerShellError as exc:
        raise ProbeBroken(str(exc)) from None
    if not isinstance(data, dict) or "ok" not in data:
        raise ProbeBroken(redact(f"{what}: unexpected probe output {stdout.strip()[:300]!r}"))
    return bool(data["ok"]), str(data.get("detail", ""))


# ------------------------------------------------------------------ TCP connect (closed rows)

CONNECT_SECONDS = 5   # one connection attempt; a firewall drop shows as this timeout
CLOSED_ATTEMPTS = 3   # a closed path must refuse or drop every one of these


def linux_tcp_script(host: str, port: int, timeout: int = CONNECT_SECONDS) -> str:
    """busybox nc -z (netcat 1.10 compatible scan mode, in busybox:1.28): exit 0 only if the TCP
    handshake completed."""
    return (f"out=$(nc -z -w {int(timeout)} {shlex.quote(host)} {int(port)} 2>&1); "
            f'echo "{MARKER}=tcp rc=$?"; echo "$out"')


def parse_linux_tcp(stdout: str, stderr: str, what: str) -> tuple[bool, str]:
    text = stdout.strip()
    marker, _, detail = text.partition("\n")
    if not marker.startswith(f"{MARKER}=tcp rc=") or "Usage:" in text or "applet not found" in text or "invalid option" in text:
        raise ProbeBroken(redact(f"{what}: the TCP probe did not run: {stderr.strip() or text}"))
    if marker.endswith("rc=0"):
        return True, "TCP connection established"
    return False, detail.strip() or "connection refused or timed out"


def windows_tcp_body(host: str, port: int, timeout: int = CONNECT_SECONDS) -> str:
    """PowerShell 5.1 block: a TCP connect with a deadline; returns {ok, detail}."""
    return f"""$client = New-Object System.Net.Sockets.TcpClient
try {{
  $task = $client.ConnectAsync({ps(host)}, {int(port)})
  $done = $false
  try {{ $done = $task.Wait({int(timeout) * 1000}) }} catch {{ return @{{ ok = $false; detail = $_.Exception.InnerException.Message }} }}
  if ($done -and $client.Connected) {{ @{{ ok = $true; detail = 'TCP connection established' }} }}
  else {{ @{{ ok = $false; detail = 'no connection within {int(timeout)} s' }} }}
}} finally {{ $client.Dispose() }}"""


def tcp_from_pod(kubectl, namespace: str, pod: str, os_name: str, host: str, port: int) -> tuple[bool, str]:
    what = f"TCP probe from pod {namespace}/{pod} to {host}:{port}"
    if os_name == "windows":
        proc = kubectl.exec(namespace, pod, winps.command_line(windows_tcp_body(host, port)).split(" "))
        return parse_windows(proc.stdout, proc.stderr, proc.returncode, what)
    proc = kubectl.exec(namespace, pod, ["sh", "-c", linux_tcp_script(host, port)])
    if proc.returncode != 0:
        raise ProbeBroken(redact(f"{what}: kubectl exec exited {proc.returncode}: {proc.stderr.strip()}"))
    return parse_linux_tcp(proc.stdout, proc.stderr, what)


class PathOpen(AssertionError):
    """A path that must stay closed connected."""


def never_connects(probe, what: str, attempts: int = CLOSED_ATTEMPTS) -> str:
    """Run a TCP probe a few times; any connection fails (PathOpen). Returns the last refusal."""
    detail = ""
    for _ in range(attempts):
        connected, detail = probe()
        if connected:
            raise PathOpen(redact(f"{what}: connected ({detail}), but this path must be closed"))
    return detail


# ------------------------------------------------------------------ sources


def from_pod(kubectl, namespace: str, pod: str, os_name: str, url: str, dns_name: str | None) -> tuple[bool, str]:
    what = f"probe from pod {namespace}/{pod}"
    if os_name == "windows":
        proc = kubectl.exec(namespace, pod, windows_argv(url, dns_name))
        return parse_windows(proc.stdout, proc.stderr, proc.returncode, what)
    proc = kubectl.exec(namespace, pod, ["sh", "-c", linux_script(url, dns_name)])
    if proc.returncode != 0:
        raise ProbeBroken(redact(f"{what}: kubectl exec exited {proc.returncode}: {proc.stderr.strip()}"))
    return parse_linux(proc.stdout, proc.stderr, what)


def from_windows_host(host, url: str) -> tuple[bool, str]:
    """From a Windows node itself, through its testinfra (winrm) connection."""
    what = f"probe from node {host.backend.get_pytest_id()}"
    try:
        data = winps.query(host, windows_body(url, None), what)
    except winps.PowerShellError as exc:
        raise ProbeBroken(str(exc)) from None
    except Exception as exc:  # WinRM transport: the node itself is unreachable, the probe never ran
        raise ProbeBroken(redact(f"{what}: {type(exc).__name__}: {exc}")) from None
    return bool(data["ok"]), str(data.get("detail", ""))


def from_here(url: str, timeout: int = PER_TRY_SECONDS) -> tuple[bool, str]:
    """From the machine running the spec. Never through a proxy: the path itself is tested."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout) as resp:
            return True, f"HTTP {resp.status}"
    except urllib.error.HTTPError as exc:
        return True, f"HTTP {exc.code}"
    except (urllib.error.URLError, socket.timeout, ConnectionError, OSError) as exc:
        return False, f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"


def until_answered(probe, what: str, deadline: float = DEADLINE_SECONDS, clock=time.monotonic, sleep=time.sleep) -> str:
    """Repeat a probe until it gets an answer or the deadline passes (then PathUnreachable)."""
    end = clock() + deadline
    attempts, detail = 0, ""
    while True:
        attempts += 1
        ok, detail = probe()
        if ok:
            return detail
        if clock() >= end:
            raise PathUnreachable(redact(f"{what}: no answer after {attempts} attempts in {deadline:.0f} s: {detail}"))
        sleep(2)
