"""Check every rendered artifact with the program that will consume it (DESIGN, Verification)."""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .. import sources
from ..cluster_model import Cluster
from ..errors import K4wError
from ..tools import require


@dataclass
class Result:
    validator: str
    tool: str
    checked: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems


def _run(cmd: list[str], env: dict | None = None) -> tuple[int, str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    return proc.returncode, (proc.stdout + proc.stderr).strip()


def _rel(path: Path) -> str:
    try:
        return str(path.relative_to(sources.REPO.root))
    except ValueError:
        return str(path)


def packer_templates(cluster: Cluster, out: Path) -> Result:
    res = Result("Packer templates", "packer validate")
    packer = require("packer")
    # Only the variable's presence matters to validate; the real value is generated per build.
    env = {**os.environ, "K4W_ADMIN_PASSWORD": "validate-only-placeholder", "CHECKPOINT_DISABLE": "1"}
    for tpl in sorted((out / "packer").glob("*.json")):
        res.checked.append(_rel(tpl))
        code, text = _run([packer, "validate", str(tpl)], env=env)
        if code != 0:
            res.problems.append(f"{_rel(tpl)}: {text}")
    return res


def preseeds(cluster: Cluster, out: Path) -> Result:
    res = Result("preseed", "debconf-set-selections --checkonly")
    tool = require("debconf-set-selections")
    for seed in sorted((out / "http").glob("*/preseed.cfg")):
        res.checked.append(_rel(seed))
        code, text = _run([tool, "--checkonly", str(seed)])
        if code != 0 or text:
            res.problems.append(f"{_rel(seed)}: {text or f'exit {code}'}")
    return res


def shell_scripts(cluster: Cluster, out: Path) -> Result:
    res = Result("bash scripts", "shellcheck")
    tool = require("shellcheck")
    repo = sources.REPO
    scripts = sorted(repo.guest.rglob("*.sh")) + sorted(repo.host.rglob("*.sh")) + sorted((repo.root / "scripts").glob("*.sh"))
    scripts += [p for p in (repo.root / ".ci").glob("*") if p.is_file()]
    for script in scripts:
        res.checked.append(_rel(script))
        code, text = _run([tool, "-x", "--source-path=SCRIPTDIR", "--severity=style", str(script)])
        if code != 0:
            res.problems.append(f"{_rel(script)}:\n{text}")
    return res


def powershell_scripts(cluster: Cluster, out: Path) -> Result:
    res = Result("PowerShell scripts", "tree-sitter-powershell")
    from . import powershell_rules as powershell

    for script in sorted(sources.REPO.guest.rglob("*.ps1")) + sorted(sources.REPO.host.rglob("*.ps1")):
        res.checked.append(_rel(script))
        # The parse catches syntax errors; the lint catches what PowerShell refuses but the grammar allows.
        res.problems += [f"{_rel(script)}:{p}" for p in powershell.parse_errors(script) + powershell.lint_errors(script)]
    for name, text in _generated_powershell(cluster):
        res.checked.append(name)
        res.problems += [f"{name}:{p}" for p in powershell.parse_text_errors(text)]
    return res


def _generated_powershell(cluster: Cluster) -> list[tuple[str, str]]:
    """PowerShell that k4w generates at run time (network-up), checked like the files."""
    try:
        from ..cluster import network as hyperv_network
    except ImportError:
        return []
    return [("network-up (generated)", hyperv_network.network_up_script(cluster.config))]


def unattend_files(cluster: Cluster, out: Path) -> Result:
    res = Result("Autounattend.xml", "lxml + structural rules")
    from . import unattend_rules as unattend

    for box, prof in cluster.profiles.items():
        if not prof.is_windows:
            continue
        path = out / "http" / box / "Autounattend.xml"
        res.checked.append(_rel(path))
        if not path.is_file():
            res.problems.append(f"{_rel(path)}: not rendered")
            continue
        build = prof.data.get("build", {})
        problems = unattend.check_unattend(
            path.read_text(encoding="utf-8"), int(build.get("generation", 2)), int(prof.data.iso.index), proxy=cluster.proxy
        )
        res.problems += [f"{_rel(path)}: {p}" for p in problems]
    return res


def manifests(cluster: Cluster, out: Path) -> Result:
    res = Result("Kubernetes manifests and node configs", "kubernetes-validate + structural rules")
    from . import manifest_rules as manifest_checks

    res.checked = [_rel(p) for p in sorted((out / "manifests").rglob("*.yaml"))]
    res.checked += [_rel(p) for p in sorted((out / "kubeadm").glob("*"))]
    res.checked += [_rel(p) for p in sorted((out / "nodes").rglob("*")) if p.is_file()]
    res.problems = manifest_checks.check_manifests(out, cluster)
    return res


def vagrantfiles(cluster: Cluster, out: Path) -> Result:
    res = Result("Vagrantfiles", "ruby -c")
    ruby = require("ruby")
    files = [sources.REPO.vagrant / "Vagrantfile", *sorted((sources.REPO.vagrant / "box").glob("*.Vagrantfile"))]
    for vf in files:
        res.checked.append(_rel(vf))
        if not vf.is_file():
            res.problems.append(f"{_rel(vf)}: missing")
            continue
        code, text = _run([ruby, "-c", str(vf)])
        if code != 0:
            res.problems.append(f"{_rel(vf)}: {text}")
    return res


VALIDATORS: list[Callable[[Cluster, Path], Result]] = [
    packer_templates,
    preseeds,
    shell_scripts,
    powershell_scripts,
    unattend_files,
    manifests,
    vagrantfiles,
]


def validate_all(cluster: Cluster, out: Path, report: Callable[[Result], None] | None = None) -> list[Result]:
    """Run every validator on an already rendered out dir. A missing tool is a failed result."""
    results = []
    for validator in VALIDATORS:
        started = time.monotonic()
        try:
            res = validator(cluster, Path(out))
        except K4wError as exc:
            res = Result(validator.__name__, "-", problems=[str(exc)])
        res.seconds = time.monotonic() - started
        results.append(res)
        if report:
            report(res)
    return results
