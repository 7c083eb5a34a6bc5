"""Fail a box spec fast and clearly when its host cannot be reached.

An unreachable host must FAIL (never skip), and must not cost a connection timeout per
check: the first attempt per host is remembered and every later check fails at once with
the same reason.
"""

from __future__ import annotations

from k4w.infra.redact import redact

_seen: dict[str, str | None] = {}  # host id -> None (reachable) or why not


def require(host) -> None:
    import pytest  # the specs run under pytest; the package does not otherwise need it

    key = host.backend.get_pytest_id()
    if key not in _seen:
        try:
            res = host.run("echo k4w-reachable")
            _seen[key] = None if "k4w-reachable" in res.stdout else f"exit {res.rc}: {res.stderr.strip()}"
        except Exception as exc:  # ssh exit 255, WinRM transport errors, ...: all mean "not reached"
            _seen[key] = _describe(exc)
    if _seen[key] is not None:
        pytest.fail(redact(f"host {key} cannot be reached, so no check of it ran: {_seen[key]}"), pytrace=False)


def _describe(exc: Exception) -> str:
    # testinfra's ssh backend raises RuntimeError(CommandResult) when ssh itself exits 255.
    result = exc.args[0] if exc.args else None
    if hasattr(result, "exit_status") and hasattr(result, "stderr"):
        message = result.stderr.strip() or "no message (Vagrant's ssh-config sets LogLevel FATAL)"
        return f"ssh exited {result.exit_status}: {message}"
    return f"{type(exc).__name__}: {exc}"
