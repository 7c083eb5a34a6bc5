"""Packer options whose wrong value `packer validate` lets through.

Enumerated options of the rendered hyperv and qemu builders hold one of the values the pinned builder
names; a qemu builder's qemuargs replace none of the plugin's own drives or devices.

`packer validate` does not catch them all: the hyperv builder compares guest_additions_mode with
"attach" only, so "disable" passes validation and means nothing. The choices are read from the
builder's source at the tag the templates pin (facts/packer-hyperv-enums.yml names it); every
option listed there that a template sets is checked, in every rendered template.
"""

from __future__ import annotations

from collections.abc import Collection
from functools import lru_cache
from pathlib import Path

import yaml

from k4w.infra import packer_hcl
from k4w.infra.errors import K4wError
from k4w.derive.cluster import Cluster
from k4w.validate.result import PACKER_TEMPLATES
from k4w.validate.result import Result
from k4w.validate.result import matching
from k4w.validate.result import rel

FACTS = Path(__file__).resolve().parent / "facts" / "packer-hyperv-enums.yml"
QEMU_FACTS = Path(__file__).resolve().parent / "facts" / "packer-qemu-enums.yml"
HYPERV_BUILDERS = ("hyperv-iso", "hyperv-vmcx")


@lru_cache(maxsize=1)
def facts() -> dict:
    return yaml.safe_load(FACTS.read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def qemu_facts() -> dict:
    return yaml.safe_load(QEMU_FACTS.read_text(encoding="utf-8"))


def check_qemu(template: Path) -> list[str]:
    """The qemu builders: enumerated options the plugin does not check, and qemuargs that would replace
    the plugin's own drives or devices (facts/packer-qemu-enums.yml says which and why)."""
    table = qemu_facts()
    source = f"{table['sources']['plugin']['repo']}@{table['sources']['plugin']['tag']}"
    problems = []
    for number, builder in enumerate(packer_hcl.load(template).get("builders", []), 1):
        if builder.get("type") != "qemu":
            continue
        for option, spec in table["options"].items():
            if option in builder and builder[option] not in spec["values"]:
                problems.append(f"{template.name} builder {number}: {option} is {builder[option]!r}, not one of "
                                f"{spec['values']} ({source}: {spec['where']})")
        for arg in builder.get("qemuargs") or []:
            switch = arg[0] if isinstance(arg, list) and arg else arg
            if switch in table["replacing_switches"]:
                problems.append(f"{template.name} builder {number}: qemuargs {switch} replaces {table['replacing_switches'][switch]} "
                                f"({source} builder/qemu/step_run.go applyUserOverrides); attach a CD with -cdrom instead")
    return problems


def check_template(template: Path) -> list[str]:
    """"<file> builder <n>: <option> ..." for every enumerated option with a value the builder lacks."""
    table = facts()
    sources = " and ".join(f"{s['repo']}@{s['tag']}" for s in table["sources"].values())
    problems = []
    for number, builder in enumerate(packer_hcl.load(template).get("builders", []), 1):
        if builder.get("type") not in HYPERV_BUILDERS:
            continue
        for option, spec in table["options"].items():
            if option in builder and builder[option] not in spec["values"]:
                problems.append(f"{template.name} builder {number}: {option} is {builder[option]!r}, not one of "
                                f"{spec['values']} ({sources}: {spec['where']})")
    return problems


def check_restarts(template: Path) -> list[str]:
    """Every windows-restart waits out a pending reboot (check_registry): a feature install
    (Containers, Hyper-V) can still be finishing when WinRM answers again, and the next step would
    run on a half-configured system. Without the option Packer only waits for WinRM."""
    provisioners = packer_hcl.load(template).get("provisioners", [])
    return [f"{template.name} provisioner {number}: windows-restart without \"check_registry\": true continues while "
            "Windows still has a reboot pending (hashicorp/packer@v1.9.4 provisioner/windows-restart)"
            for number, p in enumerate(provisioners, 1) if p.get("type") == "windows-restart" and p.get("check_registry") is not True]


def check(out: Path) -> tuple[list[str], list[str]]:
    """(templates checked, problems) for the rendered Packer templates under OUT. A template that is
    not HCL2 is one problem here (packer validate names the syntax error too), never a crash."""
    templates = sorted(out.glob(packer_hcl.GLOB))
    problems = []
    for template in templates:
        try:
            problems += check_template(template) + check_qemu(template) + check_restarts(template)
        except K4wError as exc:
            problems.append(str(exc))
    return [str(t) for t in templates], problems


# ------------------------------------------------------------------ the validator (k4w.validate.VALIDATORS)


def run(cluster: Cluster, out: Path) -> Result:
    res = Result("Packer options", "the hyperv and qemu builders' own choices and windows-restart at the tags")
    checked, res.problems = check(out)
    res.checked = [rel(Path(c)) for c in checked]
    return res


def would_run(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    return [f"# in this process: enumerated hyperv and qemu options of {t} against k4w/validate/facts/packer-hyperv-enums.yml "
            f"and packer-qemu-enums.yml, qemuargs, and windows-restart check_registry"
            for t in matching(rendered, out, PACKER_TEMPLATES)]
