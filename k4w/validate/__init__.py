"""Check every rendered artifact with the program that will consume it (README.md, Verification)."""

from __future__ import annotations

import importlib
import os
import shlex
import shutil
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Callable

from k4w.derive import values as derive
from k4w.infra import packer_hcl, proc
from k4w.infra import sources
from k4w.derive.cluster import Cluster
from k4w.infra.errors import K4wError, ToolMissing
from k4w.infra.tools import require

# Rendered artifacts the external validators read, as globs relative to OUT.
PACKER_TEMPLATES = packer_hcl.GLOB
PRESEEDS = "http/*/preseed.cfg"
# NoCloud seeds of autoinstall boxes (templates/http/ubuntu/autoinstall/).
USER_DATA = "http/*/user-data"
# Only the variable's presence matters to validate; the real value is generated per build.
PACKER_VALIDATE_ENV = {"K4W_ADMIN_PASSWORD": "validate-only-placeholder", "CHECKPOINT_DISABLE": "1"}


@dataclass
class Result:
    validator: str
    tool: str
    checked: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0
    missing_tool: str | None = None  # the validator could not run: this program is not installed
    notes: list[str] = field(default_factory=list)  # what this consumer could not check here, said out loud

    @property
    def ok(self) -> bool:
        return not self.problems


def _run(cmd: list[str], env: dict | None = None) -> tuple[int, str]:
    result = proc.run(cmd, env=env)
    return result.returncode, result.output.strip()


def _rel(path: Path) -> str:
    try:
        return str(path.relative_to(sources.REPO.root))
    except ValueError:
        return str(path)


def _packer_init(packer: str, template: Path) -> list[str]:
    return [packer, "init", str(template)]


def _packer_validate(packer: str, template: Path) -> list[str]:
    return [packer, "validate", str(template)]


def _packer_env() -> dict[str, str]:
    """What packer init and validate run with: the pinned Packer's plugin cache
    (k4w.infra.packer_cli.plugin_env), and the variables the templates read."""
    from k4w.infra import packer_cli

    return {**os.environ, **packer_cli.plugin_env(), **PACKER_VALIDATE_ENV}


def _preseed_check(tool: str, seed: Path) -> list[str]:
    return [tool, "--checkonly", str(seed)]


def _cloud_init_schema(tool: str, user_data: Path) -> list[str]:
    # Debian 12's cloud-init 22.4 spells it `schema -c FILE` (newer ones also take --config-file).
    return [tool, "schema", "-c", str(user_data)]


def _shellcheck(tool: str, script: Path) -> list[str]:
    return [tool, "-x", "--source-path=SCRIPTDIR", "--severity=style", str(script)]


def _ruby_syntax(ruby: str, vagrantfile: Path) -> list[str]:
    return [ruby, "-c", str(vagrantfile)]


def _shell_script_files(repo: sources.Sources) -> list[Path]:
    scripts = sorted(repo.guest.rglob("*.sh")) + sorted(repo.host.rglob("*.sh")) + sorted((repo.root / "scripts").glob("*.sh"))
    return scripts + [p for p in (repo.root / ".ci").glob("*") if p.is_file()]


def _powershell_files(repo: sources.Sources) -> list[Path]:
    return sorted(repo.guest.rglob("*.ps1")) + sorted(repo.host.rglob("*.ps1"))


def _vagrantfiles(repo: sources.Sources) -> list[Path]:
    return [repo.vagrant / "Vagrantfile", *sorted((repo.vagrant / "box").glob("*.Vagrantfile"))]


def _windows_boxes(cluster: Cluster) -> list[str]:
    return [box for box, prof in cluster.profiles.items() if prof.is_windows]


def _run_each(res: Result, files: list[Path], argv_of: Callable[[Path], list[str]], env: dict | None = None,
              quiet_when_ok: bool = False, separator: str = ": ") -> Result:
    """Run one consumer per file; a non-zero exit (or, with quiet_when_ok, any output) is a problem."""
    for path in files:
        res.checked.append(_rel(path))
        code, text = _run(argv_of(path), env=env)
        if code != 0 or (quiet_when_ok and text):
            res.problems.append(f"{_rel(path)}{separator}{text or f'exit {code}'}")
    return res


def packer_templates(cluster: Cluster, out: Path) -> Result:
    """packer init (the required plugins, from PACKER_PLUGIN_PATH: no network when they are
    installed), then packer validate, which decodes every option with the plugins themselves."""
    packer, env = require("packer"), _packer_env()
    res = Result("Packer templates", f"packer init + packer validate ({packer})")
    for template in sorted(out.glob(PACKER_TEMPLATES)):
        res.checked.append(_rel(template))
        for argv in (_packer_init(packer, template), _packer_validate(packer, template)):
            code, text = _run(argv, env=env)
            if code != 0:
                res.problems.append(f"{_rel(template)}: packer {argv[1]}: {text or f'exit {code}'}")
                break
    return res


def preseeds(cluster: Cluster, out: Path) -> Result:
    tool = require("debconf-set-selections")
    # debconf-set-selections --checkonly prints its complaints and may still exit 0.
    return _run_each(Result("preseed", "debconf-set-selections --checkonly"), sorted(out.glob(PRESEEDS)),
                     lambda seed: _preseed_check(tool, seed), quiet_when_ok=True)


def cloud_configs(cluster: Cluster, out: Path) -> Result:
    """The whole user-data as cloud-init in the live installer reads it: `#cloud-config` first, every
    key it knows of the right shape (the autoinstall section is subiquity's, checked below)."""
    files = sorted(out.glob(USER_DATA))
    res = Result("cloud-config (user-data)", "cloud-init schema")
    if not files:
        return res
    tool = require("cloud-init")
    return _run_each(res, files, lambda seed: _cloud_init_schema(tool, seed))


def _subiquity_release(cluster: Cluster, seed: Path) -> str | None:
    """The subiquity release of the box whose seed this is (OUT/http/<box>/user-data): its profile's
    installer.subiquity, None (the default schema) for a profile that names none."""
    prof = cluster.profiles.get(seed.parent.name)
    release = ((prof.data.get("installer") or {}).get("subiquity")) if prof else None
    return None if release is None else str(release)


def autoinstall_seeds(cluster: Cluster, out: Path) -> Result:
    res = Result("autoinstall (user-data)", "subiquity's autoinstall-schema.json + jsonschema")
    from . import autoinstall_rules

    for seed in sorted(out.glob(USER_DATA)):
        res.checked.append(_rel(seed))
        text, release = seed.read_text(encoding="utf-8"), _subiquity_release(cluster, seed)
        res.problems += [f"{_rel(seed)}: {p}" for p in autoinstall_rules.check_user_data(text, release)]
    return res


def shell_scripts(cluster: Cluster, out: Path) -> Result:
    tool = require("shellcheck")
    return _run_each(Result("bash scripts", "shellcheck"), _shell_script_files(cluster.sources),
                     lambda script: _shellcheck(tool, script), separator=":\n")


def powershell_scripts(cluster: Cluster, out: Path) -> Result:
    res = Result("PowerShell scripts", "tree-sitter-powershell + Windows PowerShell 5.1 rules")
    from . import powershell_rules as powershell
    from . import powershell_snippets, ps51_rules

    scripts = _powershell_files(cluster.sources)
    pitfalls = ps51_rules.check_files(scripts)
    for script in scripts:
        res.checked.append(_rel(script))
        # The parse catches syntax errors; the lint catches what PowerShell refuses but the grammar
        # allows; the 5.1 rules what runs but differs from PowerShell 7.
        found = powershell.parse_errors(script) + powershell.lint_errors(script) + pitfalls[script]
        res.problems += [f"{_rel(script)}:{p}" for p in found]
    functions = ps51_rules.defined_functions([script.read_bytes() for script in scripts])
    for where, snippet in powershell_snippets.rendered(out):
        res.checked.append(where)
        found = powershell.parse_text_errors(snippet) + ps51_rules.check_text(snippet, functions)
        res.problems += [f"{where}:{p}" for p in found]
    return res


def unattend_files(cluster: Cluster, out: Path) -> Result:
    res = Result("Autounattend.xml", "lxml + structural rules")
    from . import unattend_rules as unattend

    for box in _windows_boxes(cluster):
        prof = cluster.profile(box)
        path = out / "http" / box / "Autounattend.xml"
        res.checked.append(_rel(path))
        if not path.is_file():
            res.problems.append(f"{_rel(path)}: not rendered")
            continue
        build = prof.data.get("build", {})
        problems = unattend.check_unattend(
            path.read_text(encoding="utf-8"), int(build.get("generation", 2)), int(prof.data.iso.index), proxy=cluster.proxy,
            image_name=prof.data.iso.get("image_name"),
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


def kubeadm_config(cluster: Cluster, out: Path) -> Result:
    res = Result("kubeadm config", "fields of kubeadm's types at the pinned API")
    from k4w.model import kubeadm_fields as kubeadm_rules

    path = out / "kubeadm" / "kubeadm-config.yaml"
    res.checked.append(_rel(path))
    # A cluster k4w did not make has no init config of k4w's (cluster.existing): only the joins.
    res.problems = [] if cluster.config.joins_existing else kubeadm_rules.check(path, cluster.kube.kubeadm_api)
    res.problems += _join_config_problems(cluster)
    return res


def real_kubeadm(cluster: Cluster, out: Path) -> Result:
    """The containerd era's kubeadm configs through the real pinned kubeadm (kubeadm_real)."""
    from . import kubeadm_real

    res = Result("kubeadm config (real kubeadm)", "kubeadm config validate + init --dry-run, the pinned kubeadm")
    outcome = kubeadm_real.check(cluster, out)
    res.checked, res.problems, res.notes = outcome.checked, outcome.problems, outcome.notes
    return res


def _join_config_problems(cluster: Cluster) -> list[str]:
    """Each worker's join configuration, as cluster-up builds it (with a sample token: the real one
    exists only during cluster-up, which checks it again), against its own kubeadm API's fields."""
    from k4w.derive import join_config

    problems = []
    for node in cluster.config.nodes:
        if node.role == "master":
            continue
        try:
            join_config.for_worker(node.box, join_config.validation_api_server(cluster), join_config.SAMPLE_TOKEN,
                                   join_config.SAMPLE_HASH, node.name, join_config.SAMPLE_INSTALLATION)
        except K4wError as exc:
            problems.append(f"join configuration of {node.name}: {exc}")
    return problems


def pinned_flags(cluster: Cluster, out: Path) -> Result:
    res = Result("flags of the pinned binaries", "flag tables from upstream source")
    from . import flag_rules, proxy_mode_rules

    res.checked, res.problems = flag_rules.check(cluster, out)
    # kube-proxy's mode is a value of a flag (Windows) or of its config (Linux), held against the same tables.
    checked, problems = proxy_mode_rules.check(cluster, out)
    res.checked += checked
    res.problems += problems
    return res


def _rule_module(artifact: str, checked_by: str, module: str, *args) -> Result:
    """The Result of a rule module of this package whose check(*args) returns (checked, problems),
    imported when its validator runs (as the others here import their tools)."""
    res = Result(artifact, checked_by)
    res.checked, res.problems = importlib.import_module(f"{__name__}.{module}").check(*args)
    return res


def checksum_sources(cluster: Cluster, out: Path) -> Result:
    return _rule_module("box profile checksums", "sources and published-checksum facts", "checksum_rules", cluster)


def packer_enums(cluster: Cluster, out: Path) -> Result:
    res = Result("Packer options", "the hyperv builders' own choices and windows-restart at the tags")
    from . import packer_option_rules

    checked, res.problems = packer_option_rules.check(out)
    res.checked = [_rel(Path(c)) for c in checked]
    return res


def cni_versions(cluster: Cluster, out: Path) -> Result:
    return _rule_module("Windows CNI versions", "the pinned CNI plugins' supported versions at their tags", "cni_rules", cluster, out)


def registry_mirrors(cluster: Cluster, out: Path) -> Result:
    return _rule_module("registry mirrors", "containerd's hosts.toml keys at the tag; the pinned containerd (config dump)",
                        "registry_rules", cluster, out)


def containerd_config_versions(cluster: Cluster, out: Path) -> Result:
    return _rule_module("containerd config versions", "each pinned containerd's ConfigVersion (facts/containerd-<version>-config.yml)",
                        "containerd_config_rules", cluster, out)


def windows_preflight(cluster: Cluster, out: Path) -> Result:
    return _rule_module("kubeadm Windows preflight", "kubeadm's SystemVerification spec at the tag", "preflight_rules", cluster)


def windows_images(cluster: Cluster, out: Path) -> Result:
    return _rule_module("Windows container images", "image tags, WIM NAMEs and pause manifest entries per Windows build",
                        "windows_image_rules", cluster)


def windows_patch_level(cluster: Cluster, out: Path) -> Result:
    return _rule_module("Windows patch level", "a pinned cumulative update, or a dated reason, per serviced Windows build",
                        "patch_rules", cluster)


def cgroup_v2(cluster: Cluster, out: Path) -> Result:
    return _rule_module("cgroup v2 only boxes", "runtime cgroup drivers and rendered files against the unified hierarchy",
                        "cgroup_rules", cluster, out)


def unit_credentials(cluster: Cluster, out: Path) -> Result:
    return _rule_module("systemd units (guest scripts, templates)", "no credential in Environment= (D-Bus readable)",
                        "systemd_unit_rules", cluster)


def apt_locks(cluster: Cluster, out: Path) -> Result:
    return _rule_module("apt commands (guest scripts)", "k4w_apt: bounded lock and first-boot waits", "apt_rules", cluster)


def yaml_templates(cluster: Cluster, out: Path) -> Result:
    from ..render import _environment
    from . import yaml_template_rules

    res = Result("YAML templates", "every value quoted (| yaml)")
    templates = cluster.sources.templates
    res.checked, res.problems = yaml_template_rules.check(_environment(templates), templates)
    return res


def hcl_templates(cluster: Cluster, out: Path) -> Result:
    from ..render import _environment
    from . import hcl_template_rules

    res = Result("Packer templates (sources)", "every value quoted (| hcl)")
    templates = cluster.sources.templates
    res.checked, res.problems = hcl_template_rules.check(_environment(templates), templates)
    return res


def vagrantfiles(cluster: Cluster, out: Path) -> Result:
    res = Result("Vagrantfiles", "ruby -c")
    ruby = require("ruby")
    files = _vagrantfiles(cluster.sources)
    res.checked += [_rel(vf) for vf in files if not vf.is_file()]
    res.problems += [f"{_rel(vf)}: missing" for vf in files if not vf.is_file()]
    return _run_each(res, [vf for vf in files if vf.is_file()], lambda vf: _ruby_syntax(ruby, vf))


def cluster_vagrantfile(cluster: Cluster, out: Path) -> Result:
    """Vagrant's own validate, Hyper-V provider, on the cluster Vagrantfile with OUT's cluster.json."""
    from . import vagrant_rules

    res = Result("cluster Vagrantfile", "vagrant validate (hyperv provider)")
    vagrant = require("vagrant")
    vagrantfile, cluster_json = cluster.sources.vagrant / "Vagrantfile", out / "vagrant" / "cluster.json"
    res.checked.append(f"{_rel(vagrantfile)} with {_rel(cluster_json)}")
    if not cluster_json.is_file():
        res.problems.append(f"{_rel(cluster_json)}: not rendered")
        return res
    outcome = vagrant_rules.validate(vagrant, vagrantfile.parent, cluster_json)
    res.problems += outcome.problems
    res.notes += [outcome.note] if outcome.note else []
    return res


# ------------------------------------------------------------------ what a dry run shows


def _tool(name: str) -> str:
    """The program a real run would start; its bare name when this host lacks it (a dry run
    must not fail for a missing tool, the real run names its install command)."""
    return shutil.which(name) or name


def _matching(rendered: Collection[str], out: Path, pattern: str) -> list[Path]:
    return [out / rel for rel in sorted(rendered) if PurePosixPath(rel).match(pattern)]


def _would_validate_packer(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    from k4w.infra import packer_cli
    from k4w.infra.tools import find

    packer = find("packer") or "packer"
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in {**packer_cli.plugin_env(packer), **PACKER_VALIDATE_ENV}.items())
    return [f"env {env} {shlex.join(argv(packer, t))}" for t in _matching(rendered, out, PACKER_TEMPLATES)
            for argv in (_packer_init, _packer_validate)]


def _would_check_preseeds(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    tool = _tool("debconf-set-selections")
    return [shlex.join(_preseed_check(tool, seed)) for seed in _matching(rendered, out, PRESEEDS)]


def _would_check_cloud_configs(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    tool = _tool("cloud-init")
    return [shlex.join(_cloud_init_schema(tool, seed)) for seed in _matching(rendered, out, USER_DATA)]


def _would_check_autoinstall(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    from . import autoinstall_rules

    lines = []
    for seed in _matching(rendered, out, USER_DATA):
        release = _subiquity_release(cluster, seed)
        try:
            origin = autoinstall_rules.source(release)
        except (OSError, autoinstall_rules.UnknownRelease):
            lines.append(f"# in this process: {seed} autoinstall section: no vendored schema of subiquity {release} (the real run fails)")
            continue
        lines.append(f"# in this process: {seed} autoinstall section against {origin['repository']} {origin['path']} at {origin['tag']}")
    return lines


def _would_shellcheck(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    tool = _tool("shellcheck")
    return [shlex.join(_shellcheck(tool, script)) for script in _shell_script_files(cluster.sources)]


def _would_parse_powershell(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    names = [str(p) for p in _powershell_files(cluster.sources)]
    return [f"# in this process: parse and lint {name}, with the Windows PowerShell 5.1 rules" for name in names] + \
        ["# in this process: the same on the PowerShell inline in the rendered Packer templates and Autounattend.xml"]


def _would_check_unattend(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    return [f"# in this process: structural rules on {out / 'http' / box / 'Autounattend.xml'}" for box in _windows_boxes(cluster)]


def _would_check_kubeadm_config(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    from k4w.model import kubeadm_fields as kubeadm_rules

    return [f"# in this process: every field of {out / 'kubeadm' / 'kubeadm-config.yaml'} against "
            f"{kubeadm_rules.table_path(cluster.kube.kubeadm_api)}",
            "# in this process: every worker's kubeadm join configuration (sample token) against its kubeadm API's field table"]


def _would_run_real_kubeadm(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    from k4w.infra import pinned_tools
    from . import kubeadm_real

    kubeadm = pinned_tools.binary(kubeadm_real.TOOL, kubeadm_real.PROGRAM) or Path(kubeadm_real.PROGRAM)
    lines = []
    for config in kubeadm_real.configs(cluster, out):
        path = out / config.label if config.init else Path(f"$TMP/<{config.label}>.yaml")
        lines.append(shlex.join(kubeadm_real.validate_command(kubeadm, path)))
        if config.init:
            lines.append(f"{kubeadm_real.DRY_RUN_DIR_ENV}=$TMP/dry-run " + shlex.join(kubeadm_real.dry_run_command(kubeadm, path)))
    return lines or ["# no kubeadm v1beta4 config in this cluster: nothing for the real kubeadm to read"]


def _would_check_flags(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    return [f"# in this process: every kubelet, kube-proxy, flanneld and kubeadm flag in {out / 'nodes'}, "
            f"{out / 'kubeadm'} and guest/ against k4w/validate/facts/, and kube-proxy's explicit mode"]


def _would_check_checksum_sources(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    return ["# in this process: every profile checksum names its source; no unpublished checksum file is used"]


def _would_check_manifests(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    return [f"# in this process: kubernetes-validate and agreement rules on {out / d}" for d in ("manifests", "kubeadm", "nodes")]


def _would_check_packer_enums(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    return [f"# in this process: enumerated hyperv options of {t} against k4w/validate/facts/packer-hyperv-enums.yml, and windows-restart check_registry"
            for t in _matching(rendered, out, PACKER_TEMPLATES)]


def _would_check_cni_versions(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    return [f"# in this process: cniVersion of {out / rel} against k4w/validate/facts/cni-plugin-versions.yml"
            for rel in sorted(rendered) if PurePosixPath(rel).match("nodes/*/cni.conf")]


def _would_check_registry_mirrors(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    if not cluster.config.registry.mirrors:
        return []
    return ["# in this process: the mirrors' hosts.toml against k4w/validate/facts/containerd-<version>-hosts.yml, every "
            "pulled image's upstream name against k4w/validate/facts/upstream-images.yml",
            "containerd --config <temporary config importing the credentials drop-in> config dump"]


def _would_check_containerd_config_versions(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    return [f"# in this process: K4W_CONTAINERD_CONFIG_VERSION in {out / 'packer'}/<containerd box>.pkr.hcl, the registry "
            "credentials drop-in and the guest scripts against k4w/validate/facts/containerd-<version>-config.yml"]


def _would_check_windows_preflight(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    return ["# in this process: each seed-recipe Windows box's build and Docker version against "
            "k4w/validate/facts/kubeadm-<minor>-windows-preflight.yml"]


def _would_check_windows_images(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    return ["# in this process: each Windows box's images, iso.image_name and pulled pause image against its "
            "guest.os_build (k4w/validate/facts/windows-images.yml)"]


def _would_check_windows_patch_level(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    return ["# in this process: each Windows box of a serviced build (k4w/validate/facts/windows-servicing.yml) pins "
            "its cumulative update or a no_windows_update reason dated within the last 62 days"]


def _would_check_cgroup_v2(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    return ["# in this process: each cgroup_v2_only box's cgroup drivers, its rendered files, the Ubuntu guest "
            f"scripts and {out / 'kubeadm' / 'kubeadm-config.yaml'} against the v2-only hierarchy"]


def _would_check_unit_credentials(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    return ["# in this process: every Environment= a guest script or template writes into a systemd unit names "
            "no proxy or credential variable (k4w/validate/systemd_unit_rules.py)"]


def _would_check_apt_locks(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    return ["# in this process: every apt command of the guest scripts goes through lib.sh's k4w_apt "
            "(k4w/validate/apt_rules.py)"]


def _would_check_yaml_templates(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    return ["# in this process: every value in a YAML template goes through the quoting yaml filter"]


def _would_check_hcl_templates(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    return ["# in this process: every value in a Packer template goes through the quoting hcl filter"]


def _would_check_vagrantfiles(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    ruby = _tool("ruby")
    return [shlex.join(_ruby_syntax(ruby, vf)) for vf in _vagrantfiles(cluster.sources)]


def _would_vagrant_validate(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    from . import vagrant_rules

    env = vagrant_rules.environment(Path("$TMP"), Path("$TMP") / "cluster.json")
    shown = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items() if k != "PATH")
    return [f"# in {cluster.sources.vagrant}, with $TMP a throwaway folder: $TMP/vagrant.d/Vagrantfile is "
            f"{vagrant_rules.SHIM} and $TMP/cluster.json is {out / 'vagrant' / 'cluster.json'} without its Windows machines",
            f"env {shown} {shlex.join(vagrant_rules.argv(_tool('vagrant')))}"]


@dataclass(frozen=True)
class Validator:
    """One consumer of the artifacts: the check of a rendered OUT, and the commands a dry run
    shows instead (from the in-memory render's file names, since OUT is not written then)."""

    check: Callable[[Cluster, Path], Result]
    would_run: Callable[[Cluster, Path, Collection[str]], list[str]]


VALIDATORS: list[Validator] = [
    Validator(packer_templates, _would_validate_packer),
    Validator(packer_enums, _would_check_packer_enums),
    Validator(preseeds, _would_check_preseeds),
    Validator(cloud_configs, _would_check_cloud_configs),
    Validator(autoinstall_seeds, _would_check_autoinstall),
    Validator(shell_scripts, _would_shellcheck),
    Validator(powershell_scripts, _would_parse_powershell),
    Validator(unattend_files, _would_check_unattend),
    Validator(manifests, _would_check_manifests),
    Validator(kubeadm_config, _would_check_kubeadm_config),
    Validator(real_kubeadm, _would_run_real_kubeadm),
    Validator(pinned_flags, _would_check_flags),
    Validator(checksum_sources, _would_check_checksum_sources),
    Validator(windows_preflight, _would_check_windows_preflight),
    Validator(cni_versions, _would_check_cni_versions),
    Validator(windows_images, _would_check_windows_images),
    Validator(windows_patch_level, _would_check_windows_patch_level),
    Validator(cgroup_v2, _would_check_cgroup_v2),
    Validator(registry_mirrors, _would_check_registry_mirrors),
    Validator(containerd_config_versions, _would_check_containerd_config_versions),
    Validator(unit_credentials, _would_check_unit_credentials),
    Validator(apt_locks, _would_check_apt_locks),
    Validator(yaml_templates, _would_check_yaml_templates),
    Validator(hcl_templates, _would_check_hcl_templates),
    Validator(vagrantfiles, _would_check_vagrantfiles),
    Validator(cluster_vagrantfile, _would_vagrant_validate),
]


def validate_all(cluster: Cluster, out: Path, report: Callable[[Result], None] | None = None) -> list[Result]:
    """Run every validator on an already rendered out dir. A missing tool is a failed result."""
    results = []
    for validator in VALIDATORS:
        started = time.monotonic()
        try:
            res = validator.check(cluster, Path(out))
        except ToolMissing as exc:
            res = Result(validator.check.__name__, exc.tool, problems=[str(exc)], missing_tool=exc.tool)
        except K4wError as exc:
            res = Result(validator.check.__name__, "-", problems=[str(exc)])
        res.seconds = time.monotonic() - started
        results.append(res)
        if report:
            report(res)
    return results


def would_run(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    """Every command validate_all would run on OUT once `rendered` is written there, in order."""
    return [line for validator in VALIDATORS for line in validator.would_run(cluster, Path(out), rendered)]
