"""The rendered Windows node's *.args files (kubelet.args, kube-proxy.args, flanneld.args): one flag a line,
read by every rule that holds a flag to the config (manifest_rules, node_mark_rules), so they share one reader."""

from __future__ import annotations

from pathlib import Path


def read_args(path: Path) -> dict[str, str]:
    """--flag=value lines as {flag: value} ('' for a bare --flag)."""
    args = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line:
            continue
        flag, _, value = line.partition("=")
        args[flag] = value
    return args
