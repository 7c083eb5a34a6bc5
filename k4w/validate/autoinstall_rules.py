"""The autoinstall section of a rendered NoCloud user-data, held against subiquity's own schema.

subiquity validates `autoinstall:` against autoinstall-schema.json when the live installer starts;
a key it does not know or a value of the wrong type stops the install at the first boot, on a
Hyper-V host, an hour into a build. schemas/autoinstall-schema*.json are that schema, vendored from
canonical/subiquity at each installer's tag (the .source.yml beside each), so the same check runs here
with the `jsonschema` package. Each seed is held against the schema of the subiquity release on its
box's ISO (the profile's installer.subiquity; none: autoinstall-schema.json, subiquity 24.04.4). The
cloud-config part of the same file is cloud-init's to judge (`cloud-init schema`, k4w/validate/cloud_config_rules.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from functools import lru_cache
from pathlib import Path

import yaml

from k4w.derive.cluster import Cluster
from .result import USER_DATA, Result, matching, rel

SCHEMAS = Path(__file__).resolve().parent / "schemas"
SCHEMA = SCHEMAS / "autoinstall-schema.json"
SCHEMA_SOURCE = SCHEMAS / "autoinstall-schema.source.yml"
# cloud-init reads a user-data file as cloud-config only when this is its first line.
CLOUD_CONFIG_HEADER = "#cloud-config"


class UnknownRelease(ValueError):
    """A profile names a subiquity release whose schema is not vendored."""


def _release_file(release: str, suffix: str) -> Path:
    """schemas/autoinstall-schema-<release><suffix>. subiquity tags its releases by Ubuntu version
    (24.04.4, 26.04); anything else never names a file."""
    if not re.fullmatch(r"\d{2}\.\d{2}(\.\d+)?", str(release)):
        raise UnknownRelease(f"installer.subiquity {release!r} is not a subiquity release tag (like 26.04 or 24.04.4)")
    return SCHEMAS / f"autoinstall-schema-{release}{suffix}"


def schema_path(release: str | None = None) -> Path:
    """The vendored schema of subiquity `release` (None: the default, SCHEMA)."""
    return SCHEMA if release is None else _release_file(release, ".json")


def source_path(release: str | None = None) -> Path:
    """Where that schema comes from (repository, path, tag, commit, sha256)."""
    return SCHEMA_SOURCE if release is None else _release_file(release, ".source.yml")


@lru_cache(maxsize=None)
def schema(release: str | None = None) -> dict:
    path = schema_path(release)
    if not path.is_file():
        known = sorted(p.stem.removeprefix("autoinstall-schema-") for p in SCHEMAS.glob("autoinstall-schema-*.json"))
        raise UnknownRelease(f"no autoinstall schema of subiquity {release} is vendored ({path.name}; vendored releases: "
                             f"{', '.join(known) or 'none'}, else the default {source()['tag']}): vendor "
                             f"canonical/subiquity autoinstall-schema.json at that tag with its .source.yml")
    return json.loads(path.read_text(encoding="utf-8"))


def source(release: str | None = None) -> dict:
    return yaml.safe_load(source_path(release).read_text(encoding="utf-8"))


def check_user_data(text: str, release: str | None = None) -> list[str]:
    """Problems of one user-data file's autoinstall section; [] when subiquity `release` (the box
    profile's installer.subiquity; None: the default schema) would accept it."""
    import jsonschema  # a dependency of k4w (pyproject.toml); imported here like the other validators' libraries

    try:
        rules = schema(release)
    except UnknownRelease as exc:
        return [str(exc)]

    if text.splitlines()[:1] != [CLOUD_CONFIG_HEADER]:
        return [f"the first line is not {CLOUD_CONFIG_HEADER}: cloud-init would not read the file as cloud-config"]
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        return [f"not valid YAML: {exc}"]
    if not isinstance(data, dict) or not isinstance(data.get("autoinstall"), dict):
        return ["no autoinstall: section (a mapping): subiquity would ask every question interactively"]
    # As subiquity checks it (jsonschema.validate in subiquity/server/controller.py at the tag): the
    # validator class the schema asks for, the newest draft when it names none.
    validator_class = jsonschema.validators.validator_for(rules)
    problems = []
    for error in sorted(validator_class(rules).iter_errors(data["autoinstall"]), key=lambda e: [str(p) for p in e.absolute_path]):
        where = ".".join(str(part) for part in ("autoinstall", *error.absolute_path))
        problems.append(f"{where}: {_message(error)}")
    return problems + kernel_problems(data["autoinstall"])


# The Hyper-V tools: linux-cloud-tools-<flavour> carries the hv_kvp_daemon built for that flavour's
# kernel (linux-cloud-tools-common only the wrapper that runs it). Kernel metapackages name the
# same flavour as linux-<flavour> or linux-image-<flavour>.
CLOUD_TOOLS = "linux-cloud-tools-"
CLOUD_TOOLS_COMMON = "linux-cloud-tools-common"
KERNEL_PREFIXES = ("linux-image-", "linux-")


def kernel_problems(autoinstall: dict) -> list[str]:
    """A seed that installs linux-cloud-tools-<flavour> must pin the kernel to that flavour:
    without autoinstall.kernel subiquity installs the ISO's own kernel-meta-package
    (subiquity/server/controllers/kernel.py at 24.04.4: /etc/subiquity/kernel-meta-package, which
    a point release's ISO sets to the HWE kernel), for which no KVP daemon is installed; Hyper-V
    then never learns the VM's IP and Packer waits for SSH until its timeout."""
    packages = [p for p in autoinstall.get("packages") or [] if isinstance(p, str)]
    tools = sorted({p.removeprefix(CLOUD_TOOLS) for p in packages if p.startswith(CLOUD_TOOLS) and p != CLOUD_TOOLS_COMMON})
    if not tools:
        return []
    kernel = autoinstall.get("kernel")
    if not isinstance(kernel, dict) or not isinstance(kernel.get("package"), str):
        return [f"autoinstall.kernel: packages install {CLOUD_TOOLS}{tools[0]}, but no kernel.package pins the kernel to "
                "that flavour: subiquity installs the ISO's kernel (HWE on a point release), which has no KVP daemon"]
    package = kernel["package"]
    flavour = next(package.removeprefix(prefix) for prefix in KERNEL_PREFIXES if package.startswith(prefix)) \
        if package.startswith(KERNEL_PREFIXES) else package
    if tools != [flavour]:
        return [f"autoinstall.kernel.package: {package} (flavour {flavour}) is not the flavour of "
                f"{', '.join(CLOUD_TOOLS + t for t in tools)} in packages: its KVP daemon would not match the running kernel"]
    return []


def _message(error) -> str:
    """jsonschema's message, except where it would quote a whole mapping or list (which may hold
    the proxy URL with its credentials): then the rule it breaks."""
    if isinstance(error.instance, (dict, list)) and error.validator not in ("additionalProperties", "required"):
        return f"breaks the schema's {error.validator!r} rule ({error.validator_value!r})"
    return error.message


# ------------------------------------------------------------------ the validator (k4w.validate.VALIDATORS)


def _subiquity_release(cluster: Cluster, seed: Path) -> str | None:
    """The subiquity release of the box whose seed this is (OUT/http/<box>/user-data): its profile's
    installer.subiquity, None (the default schema) for a profile that names none."""
    prof = cluster.profiles.get(seed.parent.name)
    release = ((prof.data.get("installer") or {}).get("subiquity")) if prof else None
    return None if release is None else str(release)


def run(cluster: Cluster, out: Path) -> Result:
    res = Result("autoinstall (user-data)", "subiquity's autoinstall-schema.json + jsonschema")
    for seed in sorted(out.glob(USER_DATA)):
        res.checked.append(rel(seed))
        text, release = seed.read_text(encoding="utf-8"), _subiquity_release(cluster, seed)
        res.problems += [f"{rel(seed)}: {p}" for p in check_user_data(text, release)]
    return res


def would_run(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    lines = []
    for seed in matching(rendered, out, USER_DATA):
        release = _subiquity_release(cluster, seed)
        try:
            origin = source(release)
        except (OSError, UnknownRelease):
            lines.append(f"# in this process: {seed} autoinstall section: no vendored schema of subiquity {release} (the real run fails)")
            continue
        lines.append(f"# in this process: {seed} autoinstall section against {origin['repository']} {origin['path']} at {origin['tag']}")
    return lines
