"""Run a PowerShell query on a Windows guest through testinfra's winrm backend; get JSON back.

testinfra's winrm backend runs a cmd.exe command line. Scripts go as -EncodedCommand
(base64 of UTF-16LE, `powershell.exe -?`), so no quoting layer can mangle them, and every
query ends in ConvertTo-Json so Python compares data, not localised table text.
"""

from __future__ import annotations

import base64
import json

from k4w.infra.redact import redact

# Windows PowerShell 5.1 (the only PowerShell on Server 1803).
POWERSHELL = "powershell.exe -NoProfile -NonInteractive -ExecutionPolicy Bypass -EncodedCommand"

# Every query runs with the same strictness the guest scripts use, and its result (whatever
# the block returns) becomes one JSON document. -InputObject keeps a one-element array an
# array; Depth 4 is enough for every query here and keeps enum objects from exploding.
_WRAPPER = """$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
$ProgressPreference = 'SilentlyContinue'
$k4wResult = & {{
{body}
}}
ConvertTo-Json -InputObject $k4wResult -Compress -Depth 4
"""


class PowerShellError(AssertionError):
    """A query failed on the guest; the message carries its stderr (redacted)."""


def wrap(body: str) -> str:
    return _WRAPPER.format(body=body)


def encode(script: str) -> str:
    return base64.b64encode(script.encode("utf-16-le")).decode("ascii")


def command_line(body: str) -> str:
    return f"{POWERSHELL} {encode(wrap(body))}"


def parse_output(stdout: str, stderr: str, rc: int, what: str):
    if rc != 0:
        raise PowerShellError(redact(f"{what}: PowerShell exited {rc}: {stderr.strip() or stdout.strip()}"))
    text = stdout.strip().lstrip("\ufeff")
    if not text:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise PowerShellError(redact(f"{what}: output is not JSON ({exc}): {text[:500]}")) from None


def query(host, body: str, what: str):
    """Run `body` (a PowerShell script block body) on a testinfra host; return its JSON result."""
    result = host.run(command_line(body))
    return parse_output(result.stdout, result.stderr, result.rc, what)


def as_list(value) -> list:
    """PowerShell gives null, a scalar or an array for 'zero, one or many'; make it a list."""
    if value is None:
        return []
    return value if isinstance(value, list) else [value]
