"""No systemd unit or drop-in that k4w writes carries a credential where other users can read it.

systemd publishes a unit's Environment= assignments on D-Bus to every local user (`systemctl show
-p Environment UNIT`; systemd.exec(5), Environment=), and the manager's own environment likewise
(`systemctl show-environment`). Only an EnvironmentFile= keeps its values private: systemd reads the
file itself, as root, when it starts the service, and a file of mode 0600 root is read by no one else.

Two checks, one for the text k4w can write and one for what a run really wrote:
- `check` (invoke validate) reads every guest script and template: each `Environment=` in a unit
  text names a literal variable that is not a proxy or credential variable and expands no such
  variable nor a command; no script puts variables into the manager's environment.
- `tree_problems` reads the unit files a guest step wrote under a (sandbox) root: no Environment=
  names a credential variable or holds one of the given secrets, and every EnvironmentFile= the
  units name that holds a secret is mode 0600 (the tests run every unit-writing step with a
  credentialed proxy and call it).
"""

from __future__ import annotations

import re
import stat
from collections.abc import Collection
from pathlib import Path

from k4w.outdir import private
from k4w.derive.cluster import Cluster
from k4w.validate.result import Result
from k4w.validate.result import from_check

# Names that carry a proxy URL (which may hold user:password) or a secret outright.
CREDENTIAL_NAME = re.compile(r"(?i)(^|_)(proxy|pass|password|passwd|token|secret|auth|credentials?|apikey)($|_)")
# `Environment=` (not EnvironmentFile=) where a unit line starts: at a line start, or after a quote
# or a literal \n inside a bash string, as the guest scripts build unit texts.
ENVIRONMENT = re.compile(r"""(?:^|["'\s]|\\n)Environment=(?P<rest>.*)""")
ENVIRONMENT_FILE = re.compile(r"^\s*EnvironmentFile=-?(?P<path>\S+)\s*$")
LITERAL_NAME = re.compile(r"""^\\?["']?(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>.*)""")
EXPANSION = re.compile(r"\$\{?(?P<name>[A-Za-z_][A-Za-z0-9_]*)")
MANAGER_ENVIRONMENT = re.compile(r"\bsystemctl\b[^#\n]*\b(set-environment|import-environment)\b")
# The unit folders of a root (systemd.unit(5), unit load path): admin, runtime and package units.
UNIT_DIRS = ("etc/systemd/system", "run/systemd/system", "lib/systemd/system", "usr/lib/systemd/system")


def _sources(cluster: Cluster) -> list[Path]:
    repo = cluster.sources
    files = sorted(repo.guest.rglob("*.sh")) + sorted(p for p in repo.templates.rglob("*") if p.is_file())
    return files


def text_problems(text: str, where: str) -> list[str]:
    """The Environment= lines of a script or template that could put a credential in a unit."""
    problems = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("#"):
            continue  # a comment, in the script or in the unit it writes
        if MANAGER_ENVIRONMENT.search(line):
            problems.append(f"{where}:{number}: sets the systemd manager's environment, which every local user reads "
                            f"(systemctl show-environment): use a root-only EnvironmentFile= in the unit")
        for match in ENVIRONMENT.finditer(line):
            literal = LITERAL_NAME.match(match["rest"])
            if not literal:
                problems.append(f"{where}:{number}: Environment= whose variable is chosen at run time, so it may carry a "
                                f"credential every local user reads over D-Bus: write the values to a root-only "
                                f"EnvironmentFile= (mode 0600) instead")
                continue
            name, value = literal["name"], literal["value"]
            if CREDENTIAL_NAME.search(name):
                problems.append(f"{where}:{number}: Environment= sets {name}, which may carry a credential every local "
                                f"user reads over D-Bus (systemctl show -p Environment): use a root-only EnvironmentFile=")
            if "$(" in value or "`" in value:
                problems.append(f"{where}:{number}: Environment={name} takes its value from a command at run time: "
                                f"write it to a root-only EnvironmentFile= instead")
            for expanded in EXPANSION.findall(value):
                if CREDENTIAL_NAME.search(expanded):
                    problems.append(f"{where}:{number}: Environment={name} expands ${expanded}, which may carry a "
                                    f"credential: use a root-only EnvironmentFile=")
    return problems


def check(cluster: Cluster) -> tuple[list[str], list[str]]:
    checked, problems = [], []
    root = cluster.sources.root
    for path in _sources(cluster):
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # not a text a unit comes from
        where = str(path.relative_to(root))
        checked.append(where)
        problems += text_problems(text, where)
    return checked, problems


def tree_problems(root: Path, secrets: list[str]) -> list[str]:
    """What a guest step really wrote under ROOT: unit Environment= lines and the EnvironmentFile=s."""
    problems = []
    for folder in UNIT_DIRS:
        for unit in sorted((root / folder).rglob("*")) if (root / folder).is_dir() else []:
            if not unit.is_file():
                continue
            rel = unit.relative_to(root)
            text = unit.read_text(errors="replace")
            for line in text.splitlines():
                stripped = line.strip()
                if stripped.startswith("Environment="):
                    literal = LITERAL_NAME.match(stripped.removeprefix("Environment="))
                    name = literal["name"] if literal else "?"
                    if CREDENTIAL_NAME.search(name) or any(s in stripped for s in secrets):
                        problems.append(f"{rel}: Environment= sets {name}, readable by every local user over D-Bus")
                env_file = ENVIRONMENT_FILE.match(line)
                if env_file:
                    target = root / env_file["path"].lstrip("/")
                    if target.is_file() and any(s in target.read_text(errors="replace") for s in secrets):
                        mode = stat.S_IMODE(target.stat().st_mode)
                        if mode != private.MODE:   # owner-only, as k4w's own credential files
                            problems.append(f"{rel}: its EnvironmentFile {env_file['path']} holds a credential "
                                            f"and is mode {mode:04o}, not 0600")
            if any(s in text for s in secrets):
                problems.append(f"{rel}: the unit text itself holds a credential")
    return problems


# ------------------------------------------------------------------ the validator (k4w.validate.VALIDATORS)


def run(cluster: Cluster, out: Path) -> Result:
    return from_check("systemd units (guest scripts, templates)", "no credential in Environment= (D-Bus readable)", check(cluster))


def would_run(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    return ["# in this process: every Environment= a guest script or template writes into a systemd unit names "
            "no proxy or credential variable (k4w/validate/systemd_unit_rules.py)"]
