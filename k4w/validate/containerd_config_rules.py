"""Every containerd config k4w writes carries the schema version of the containerd that reads it.

containerd migrates a file of an older schema in memory at every start and logs "Configuration
migrated from version N" once per file; it refuses a newer one (k4w/derive/containerd_config.py has the
sources at v2.3.7). The version a containerd reads natively is its ConfigVersion, held per pinned
release in k4w/validate/facts/containerd-<version>-config.yml (config_version). Checked here:
- each containerd box's rendered Packer template gives its guest steps K4W_CONTAINERD_CONFIG_VERSION
  equal to that release's config_version (03-containerd writes config.toml with it);
- no guest script writes a containerd config with a literal `version = N`: the number comes from
  that step variable only, so one constant decides it for both families;
- the registry credentials drop-in (k4w/derive/registry.py auth_toml), when this cluster has one, carries
  the same version. registry_rules also has the real containerd read it and refuse a migration warning.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Collection
from pathlib import Path

import yaml

from k4w.derive import registry
from k4w.derive.cluster import Cluster
from k4w.validate.result import Result
from k4w.validate.result import from_check

FACTS = Path(__file__).parent / "facts"
STEP_VARIABLE = "K4W_CONTAINERD_CONFIG_VERSION"
# A TOML `version = ...` line, as a config body in a guest script has it (a shell assignment has no
# blanks around '=', so `version="$(...)"` is not one).
_TOML_VERSION_LINE = re.compile(r"^[ \t]*version[ \t]+=[ \t]+(\S.*?)[ \t]*$", re.M)
_RENDERED = re.compile(rf'"{STEP_VARIABLE}=([^"]*)"')


def config_version(containerd_version: str) -> int:
    """The config schema containerd <version> reads without migrating (its ConfigVersion), from its facts file."""
    path = FACTS / f"containerd-{containerd_version}-config.yml"
    if not path.is_file():
        raise FileNotFoundError(path)
    return int(yaml.safe_load(path.read_text(encoding="utf-8"))["config_version"])


def version_problem(where: str, written, wanted: int, containerd_version: str) -> str | None:
    """Why a config written with schema `written` is wrong for containerd <version>, or None."""
    if written == wanted:
        return None
    if isinstance(written, int) and written < wanted:
        return (f"{where}: containerd config version {written}, below containerd {containerd_version}'s {wanted}: "
                f"it migrates the file at every start and logs \"Configuration migrated from version {written}\"")
    if isinstance(written, int):
        return f"{where}: containerd config version {written}, above containerd {containerd_version}'s {wanted}: it refuses to start"
    return f"{where}: containerd config version {written!r} is not a number (containerd {containerd_version} reads {wanted})"


def rendered_problems(template: Path, wanted: int, containerd_version: str) -> list[str]:
    """The step variable as the rendered Packer template hands it to every guest step of the box."""
    if not template.is_file():
        return [f"{template}: not rendered, so the containerd config version its steps get is unknown"]
    values = set(_RENDERED.findall(template.read_text(encoding="utf-8")))
    if not values:
        return [f"{template}: gives its guest steps no {STEP_VARIABLE}"]
    return [p for value in sorted(values)
            if (p := version_problem(f"{template}: {STEP_VARIABLE}", int(value) if value.isdigit() else value,
                                     wanted, containerd_version))]


def literal_problems(scripts: list[Path]) -> list[str]:
    """A guest script that writes a containerd config's version as a number of its own."""
    problems = []
    for script in scripts:
        text = script.read_text(encoding="utf-8", errors="replace")
        for match in _TOML_VERSION_LINE.finditer(text):
            if re.fullmatch(r"\d+", match.group(1)):
                line = text.count("\n", 0, match.start()) + 1
                problems.append(f"{script}:{line}: a containerd config written with the literal `version = {match.group(1)}`; "
                                f"take the number from {STEP_VARIABLE} (k4w/derive/containerd_config.py), the one place that decides it")
    return problems


def drop_in_problems(auth: str, wanted: int, containerd_version: str) -> list[str]:
    if not auth:
        return []
    try:
        written = tomllib.loads(auth).get("version")
    except tomllib.TOMLDecodeError as exc:
        return [f"the registry credentials drop-in is not valid TOML: {exc}"]
    problem = version_problem("the registry credentials drop-in", written, wanted, containerd_version)
    return [problem] if problem else []


def check(cluster: Cluster, out: Path) -> tuple[list[str], list[str]]:
    checked: list[str] = []
    problems: list[str] = []
    boxes = [p for p in cluster.profiles.values() if p.container_runtime == "containerd"]
    for profile in boxes:
        version = str(profile.data.components.containerd.version)
        try:
            wanted = config_version(version)
        except FileNotFoundError as exc:
            problems.append(f"{profile.path.name}: containerd {version} has no facts file ({exc.filename}): "
                            f"its config version (RELEASES.md \"Daemon Configuration\" at the tag) is unknown")
            continue
        problems += rendered_problems(out / "packer" / f"{profile.name}.pkr.hcl", wanted, version)
        problems += drop_in_problems(registry.auth_toml(cluster.config), wanted, version)
        checked.append(f"{profile.name}: containerd {version} config version {wanted}")
    if boxes:
        scripts = sorted(p for p in cluster.sources.guest.rglob("*") if p.suffix in (".sh", ".ps1") and p.is_file())
        problems += literal_problems(scripts)
        checked.append(f"{len(scripts)} guest scripts: no literal containerd config version")
    return checked, list(dict.fromkeys(problems))  # the drop-in is the same for every box


# ------------------------------------------------------------------ the validator (k4w.validate.VALIDATORS)


def run(cluster: Cluster, out: Path) -> Result:
    return from_check("containerd config versions", "each pinned containerd's ConfigVersion (facts/containerd-<version>-config.yml)", check(cluster, out))


def would_run(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    return [f"# in this process: K4W_CONTAINERD_CONFIG_VERSION in {out / 'packer'}/<containerd box>.pkr.hcl, the registry "
            "credentials drop-in and the guest scripts against k4w/validate/facts/containerd-<version>-config.yml"]
