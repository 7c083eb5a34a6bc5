"""Every apt command of the Linux guest steps waits, bounded, for apt's locks and a first boot.

A fresh Ubuntu (24.04/26.04 first boot: cloud-init, apt-daily, unattended-upgrades) holds apt's and
dpkg's locks while the bake steps start; an apt-get that meets a held lock fails at once. So every
command that takes those locks goes through lib.sh's `k4w_apt`, which first waits for cloud-init
(`cloud-init status --wait` under timeout(1)) and apt's daily jobs, then passes
`-o DPkg::Lock::Timeout=N` (apt >= 1.9.11; apt 1.2 ignores an unknown -o item) and retries a failure
that names a lock, up to a bound.

The rule reads every guest bash script: a package-manager command at command position (not an
argument of k4w_apt, not text in a message) must be a read-only query; and lib.sh's k4w_apt must
keep the lock timeout and the bounded first-boot wait.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from pathlib import Path

from k4w.derive.cluster import Cluster
from k4w.validate.result import Result
from k4w.validate.result import from_check

LIBRARY = Path("guest/ubuntu/lib.sh")
# A package-manager command where bash reads a command: a line start, after ; & | ( $( or a
# keyword, past prefixes that still run it (sudo, env, VAR=value, timeout N, nice).
COMMAND = re.compile(
    r"""(?:^|[;&|(]|\$\(|\b(?:then|do|else|time)\b|!)\s*"""
    r"""(?:(?:sudo|env|nice|command|exec|timeout\s+\S+|[A-Za-z_][A-Za-z0-9_]*=\S*)\s+)*"""
    r"""(?P<cmd>apt-get|apt-mark|apt|aptitude|dpkg)(?![\w-])(?P<args>[^;&|)]*)""")
# Queries that take no apt or dpkg lock (apt-mark(8), apt(8), dpkg(1)).
READ_ONLY = {
    "apt-mark": re.compile(r"^\s*show(hold|auto|manual|install|remove|purge)\b"),
    "apt": re.compile(r"^\s*(list|show|search|policy)\b"),
    "dpkg": re.compile(r"^\s*(--print-architecture|--print-foreign-architectures|--compare-versions|-[lLsS]\b|--list|--listfiles|--status|--search)"),
}
# lib.sh's k4w_apt and k4w_wait_first_boot, as bash defines functions.
FUNCTION = re.compile(r"^(?P<name>k4w_[a-z_]+)\(\) \{\n(?P<body>.*?)^\}", re.M | re.S)


def script_problems(text: str, where: str) -> list[str]:
    problems = []
    for number, line in enumerate(text.splitlines(), 1):
        code = line.split(" #", 1)[0]
        if code.lstrip().startswith("#"):
            continue
        for match in COMMAND.finditer(code):
            cmd, args = match["cmd"], match["args"]
            if cmd in READ_ONLY and READ_ONLY[cmd].match(args):
                continue
            problems.append(f"{where}:{number}: '{cmd}{args.rstrip()}' takes apt's or dpkg's locks without waiting for "
                            f"them or for the first boot's cloud-init and apt jobs: run it as "
                            f"'k4w_apt {'apt-get' if cmd == 'dpkg' else cmd} ...' (lib.sh)")
    return problems


def library_problems(text: str, where: str) -> list[str]:
    functions = {m["name"]: m["body"] for m in FUNCTION.finditer(text)}
    problems = []
    apt, first_boot = functions.get("k4w_apt"), functions.get("k4w_wait_first_boot")
    if apt is None or "DPkg::Lock::Timeout=" not in apt or "k4w_wait_first_boot" not in apt:
        problems.append(f"{where}: k4w_apt must pass -o DPkg::Lock::Timeout=N to apt and call k4w_wait_first_boot first")
    if first_boot is None or not re.search(r"\btimeout\s+\S+\s+cloud-init status --wait\b", first_boot):
        problems.append(f"{where}: k4w_wait_first_boot must wait for 'cloud-init status --wait' under timeout(1)")
    if first_boot is not None and "k4w_wait_for" not in first_boot:
        problems.append(f"{where}: k4w_wait_first_boot must wait, bounded (k4w_wait_for), for apt's daily jobs")
    return problems


def check(cluster: Cluster) -> tuple[list[str], list[str]]:
    root = cluster.sources.root
    checked, problems = [], []
    for script in sorted(cluster.sources.guest.rglob("*.sh")):
        where = str(script.relative_to(root))
        checked.append(where)
        problems += script_problems(script.read_text(encoding="utf-8"), where)
    library = root / LIBRARY
    problems += library_problems(library.read_text(encoding="utf-8"), str(LIBRARY))
    return checked, problems


# ------------------------------------------------------------------ the validator (k4w.validate.VALIDATORS)


def run(cluster: Cluster, out: Path) -> Result:
    return from_check("apt commands (guest scripts)", "k4w_apt: bounded lock and first-boot waits", check(cluster))


def would_run(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    return ["# in this process: every apt command of the guest scripts goes through lib.sh's k4w_apt "
            "(k4w/validate/apt_rules.py)"]
