"""The containerd era's kubeadm configs, read by the REAL kubeadm of the pinned version.

The kubeadm the tool cache holds (tools/lock.yml kubernetes-node, built from the Go module proxy by
scripts/build-tools; k4w.infra.pinned_tools) reads:
- the master's init configuration, OUT/kubeadm/kubeadm-config.yaml, with `kubeadm config validate
  --config F` (strict decoding: an unknown field is an error; then kubeadm's own validation of every
  value, the kubelet and kube-proxy component configs included) and `kubeadm init --dry-run --config F`,
  which runs init's phases against that config (certificates, kubeconfigs, static Pod manifests,
  kubelet config, the objects init would create) without a node: its preflight checks are the node's
  (a CRI socket, a kubelet, sysctls), so they are ignored here, and its files go to a private
  temporary folder (KUBEADM_INIT_DRYRUN_DIR, cmd/kubeadm/app/constants/constants.go at v1.37.2);
- every worker's join configuration as cluster-up builds it (k4w.derive.join_config.document, with
  the sample token and CA hash: the real ones exist only during cluster-up), with `kubeadm config
  validate`. Built here without join_config's own field-table check, so kubeadm judges it alone.

For an emulated CPU (k4w.derive.control_plane) the init config names kubeadm's patches folder on the master;
here it names the rendered OUT/kubeadm/patches/ instead (the one line changed), so the dry run applies the very
patches cluster-up uploads, and the static Pod manifests it writes are then held to the scaled values: the
leader-election flags and the liveness failureThreshold, as kubeadm itself merged them.

Only configurations of the kubeadm API the pinned kubeadm reads (v1beta4) go to it; the seed era
(kubeadm 1.11, v1alpha2) keeps its field tables (kubeadm_rules) and says so.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import tempfile
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from k4w.infra import pinned_tools, proc
from k4w.model import profiles
from k4w.derive import control_plane, join_config
from k4w.derive.cluster import Cluster
from k4w.validate.result import Result

TOOL, PROGRAM = "kubernetes-node", "kubeadm"
# The kubeadm API the pinned kubeadm (1.37) reads and writes: its only one (k4w.model.kubeadm_apis).
API = join_config.V1BETA4
# kubeadm init's preflight checks what the machine it runs on has (the CRI socket, a kubelet
# binary, sysctls, swap, root): this host is no node, so they are ignored; config errors come first.
DRY_RUN_FLAGS = ("--dry-run", "--ignore-preflight-errors=all")
# Where kubeadm init --dry-run writes instead of /etc/kubernetes/tmp (constants.go at v1.37.2).
DRY_RUN_DIR_ENV = "KUBEADM_INIT_DRYRUN_DIR"
# Seconds one kubeadm call may take: validate takes ~0.3 s, the dry run ~2 s on a quiet core.
TIMEOUT_S = 120
# klog's warning lines: W<mmdd> <time> <pid> <file>:<line>] <message>
_WARNING = re.compile(r"^W\d{4} [\d:.]+\s+\d+ [^\]]+\] (?P<message>.*)$")


@dataclass(frozen=True)
class Config:
    label: str  # what the config is, for messages
    text: str
    windows: bool = False  # a Windows worker's: its CRI endpoint is a named pipe Linux kubeadm cannot read
    init: bool = False
    scaling: control_plane.Scaling | None = None  # the init config of an emulated CPU's master
    patches: Path | None = None  # its rendered patches folder (OUT/kubeadm/patches)


@dataclass
class Outcome:
    checked: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def configs(cluster: Cluster, out: Path) -> list[Config]:
    """The containerd era's kubeadm configs of this cluster: the master's init config and the join
    config of every worker whose box speaks the pinned kubeadm's API."""
    found = []
    init = out / "kubeadm" / "kubeadm-config.yaml"
    if cluster.kube.kubeadm_api == API and not cluster.config.joins_existing:
        found.append(Config("kubeadm/kubeadm-config.yaml", init.read_text(encoding="utf-8") if init.is_file() else "",
                            init=True, scaling=cluster.control_plane, patches=out / control_plane.PATCHES_OUT_DIR))
    api_server = join_config.validation_api_server(cluster)
    for node in cluster.config.nodes:
        profile = profiles.load(node.box)
        if node.role == "master" or profile.data.kubernetes.kubeadm_api != API:
            continue
        document = join_config.worker_document(node.box, api_server, join_config.SAMPLE_TOKEN, join_config.SAMPLE_HASH,
                                               node.name, join_config.SAMPLE_INSTALLATION,
                                   timeouts=cluster.join_timeouts)
        found.append(Config(f"join configuration of {node.name} ({node.box}, sample token)",
                            yaml.safe_dump(document, sort_keys=False), windows=profile.is_windows))
    return found


def _version_problems(cluster: Cluster, kubeadm: Path) -> list[str]:
    pinned = pinned_tools.lock()[TOOL]["version"]
    kubernetes = [profiles.load(n.box).data.kubernetes for n in cluster.config.nodes]
    versions = {str(k.version) for k in kubernetes if k.kubeadm_api == API}
    return [f"the cluster runs Kubernetes {v}, the pinned kubeadm ({kubeadm}) is {pinned} (tools/lock.yml {TOOL}): "
            "it would judge the config by another release's rules; pin the same release in both"
            for v in sorted(versions) if f"v{v}" != pinned]


def _said(output: str) -> tuple[list[str], list[str]]:
    """kubeadm's error lines and its warnings (klog W lines), without the stack-trace hint."""
    errors, warnings = [], []
    for line in output.splitlines():
        warning = _WARNING.match(line.strip())
        if warning:
            warnings.append(warning["message"])
        elif line.startswith("error") or line.lstrip().startswith("[ERROR"):
            errors.append(line.strip())
    return errors, warnings


def check(cluster: Cluster, out: Path) -> Outcome:
    outcome = Outcome()
    found = configs(cluster, out)
    if not found:
        outcome.notes.append(f"no kubeadm {API} config in this cluster: the seed era's kubeadm configs are held against "
                             "kubeadm's field tables (the 'kubeadm config' line), as no current Go builds kubeadm 1.11")
        return outcome
    kubeadm = pinned_tools.require(TOOL, PROGRAM)
    outcome.problems += _version_problems(cluster, kubeadm)
    with tempfile.TemporaryDirectory(prefix="k4w-kubeadm-") as tmp:
        os.chmod(tmp, 0o700)  # the dry run writes a CA key and kubeconfigs there
        for index, config in enumerate(found):
            outcome.checked.append(config.label)
            if not config.text:
                outcome.problems.append(f"{config.label}: not rendered")
                continue
            path = Path(tmp) / f"config-{index}.yaml"
            text = local_patches(config)
            if text is None:
                outcome.problems.append(f"{config.label}: does not name kubeadm's patches folder as "
                                        f"`directory: \"{control_plane.PATCHES_GUEST_DIR}\"` once (libvirt.accelerator tcg)")
                continue
            path.write_text(text, encoding="utf-8")
            _validate(kubeadm, config, path, outcome)
            if config.init and not any(p.startswith(config.label) for p in outcome.problems):
                _dry_run(kubeadm, config, path, Path(tmp) / "dry-run", outcome)
    return outcome


def local_patches(config: Config) -> str | None:
    """The config's text for kubeadm on this host: an emulated CPU's init config names the rendered patches
    folder instead of the master's (the same files cluster-up uploads there). None when it does not name the
    master's folder exactly once."""
    if config.scaling is None:
        return config.text
    on_master = f'  directory: "{config.scaling.patches_dir}"\n'
    if config.text.count(on_master) != 1:
        return None
    # JSON's string is YAML's double-quoted scalar: any character of the local path stays as it is.
    return config.text.replace(on_master, f"  directory: {json.dumps(str(config.patches.resolve()))}\n")


# Keys whose type shows ClusterConfiguration.encryptionAlgorithm took effect, as `kubeadm init --dry-run` 1.37.2
# writes them into its folder (the cluster CA, kube-apiserver's serving key, etcd's serving key), and the PEM
# header of each algorithm's key (crypto/x509 MarshalECPrivateKey "EC PRIVATE KEY"; kubeadm's RSA keys are PKCS#1).
DRY_RUN_KEYS = ("ca.key", "apiserver.key", "etcd/server.key")
KEY_PEM_HEADERS = {"ECDSA-P256": "-----BEGIN EC PRIVATE KEY-----", "RSA-2048": "-----BEGIN RSA PRIVATE KEY-----"}


def scaled_manifest_problems(scaling: control_plane.Scaling, folder: Path) -> list[str]:
    """What kubeadm's static Pod manifests and keys in folder (the dry run's) lack of the emulated CPU's scaling."""
    problems = []
    for key in DRY_RUN_KEYS:
        path = folder / key
        first = path.read_text(encoding="utf-8").splitlines()[:1] if path.is_file() else ["(no such file)"]
        if first != [KEY_PEM_HEADERS[scaling.encryption_algorithm]]:
            problems.append(f"kubeadm's {key} is not an {scaling.encryption_algorithm} key ({first[0][:40]}): "
                            "ClusterConfiguration.encryptionAlgorithm did not take effect")
    for component in (*scaling.leader_electing, *scaling.liveness_tolerant):
        path = folder / f"{component}.yaml"
        try:
            container = yaml.safe_load(path.read_text(encoding="utf-8"))["spec"]["containers"][0]
        except (OSError, yaml.YAMLError, KeyError, IndexError, TypeError) as exc:
            problems.append(f"kubeadm init --dry-run wrote no readable {component} manifest ({exc})")
            continue
        if component in scaling.leader_electing:
            missing = [f for f in scaling.leader_election_flags if f not in container.get("command", [])]
            if missing:
                problems.append(f"kubeadm's {component} manifest lacks {' '.join(missing)} (ClusterConfiguration extraArgs)")
        if component in scaling.liveness_tolerant:
            got = (container.get("livenessProbe") or {}).get("failureThreshold")
            if got != scaling.liveness_failure_threshold:
                problems.append(f"kubeadm's {component} manifest has livenessProbe failureThreshold {got}, not "
                                f"{scaling.liveness_failure_threshold}: kubeadm did not apply "
                                f"{control_plane.PATCHES_OUT_DIR}/ (a misnamed file is ignored)")
            period = (container.get("readinessProbe") or {}).get("periodSeconds")
            if period != scaling.readiness_period_seconds:
                problems.append(f"kubeadm's {component} manifest has readinessProbe periodSeconds {period}, not "
                                f"{scaling.readiness_period_seconds}: kubeadm did not apply {control_plane.PATCHES_OUT_DIR}/")
    return problems


def validate_command(kubeadm: Path, path: Path) -> list[str]:
    return [str(kubeadm), "config", "validate", "--config", str(path)]


def dry_run_command(kubeadm: Path, path: Path) -> list[str]:
    return [str(kubeadm), "init", *DRY_RUN_FLAGS, "--config", str(path)]


def _validate(kubeadm: Path, config: Config, path: Path, outcome: Outcome) -> None:
    result = proc.run(validate_command(kubeadm, path), timeout=TIMEOUT_S)
    errors, warnings = _said(result.output)
    if result.returncode != 0:
        outcome.problems.append(f"{config.label}: kubeadm config validate refused it: "
                                + "; ".join(errors or [result.output.strip()[-400:]]))
    elif config.windows:
        # Linux kubeadm reads an npipe:// endpoint as a path without a scheme and warns; the
        # Windows kubeadm that joins with it accepts it. Said, not hidden.
        outcome.notes += [f"{config.label}: kubeadm on Linux warns (a Windows endpoint): {w}" for w in warnings]
    else:
        outcome.problems += [f"{config.label}: kubeadm config validate warns: {w}" for w in warnings]


def _dry_run(kubeadm: Path, config: Config, path: Path, folder: Path, outcome: Outcome) -> None:
    folder.mkdir(mode=0o700)
    result = proc.run(dry_run_command(kubeadm, path), env={**os.environ, DRY_RUN_DIR_ENV: str(folder)}, timeout=TIMEOUT_S)
    errors, _ = _said(result.output)
    fatal = [e for e in errors if not e.lstrip().startswith("[ERROR")]  # preflight's, ignored on purpose
    if result.returncode != 0:
        outcome.problems.append(f"{config.label}: kubeadm init --dry-run failed: " + "; ".join(fatal or [result.output.strip()[-400:]]))
    else:
        manifests = len(re.findall(r'^\[dryrun\] Would write file "/etc/kubernetes/manifests/', result.output, re.M))
        outcome.notes.append(f"{config.label}: kubeadm init --dry-run ran every phase (preflight ignored: this host is "
                             f"no node), {manifests} static Pod manifests")
        if config.scaling:
            scaled = scaled_manifest_problems(config.scaling, folder)
            outcome.problems += [f"{config.label}: {p}" for p in scaled]
            if not scaled:
                outcome.notes.append(
                    f"{config.label}: kubeadm applied {control_plane.PATCHES_OUT_DIR}/ and the extraArgs (emulated CPU): "
                    f"{', '.join(config.scaling.liveness_tolerant)} livenessProbe failureThreshold "
                    f"{config.scaling.liveness_failure_threshold}, readinessProbe periodSeconds "
                    f"{config.scaling.readiness_period_seconds}; {config.scaling.encryption_algorithm} keys; "
                    f"{', '.join(config.scaling.leader_electing)} "
                    + " ".join(config.scaling.leader_election_flags))


# ------------------------------------------------------------------ the validator (k4w.validate.VALIDATORS)


def run(cluster: Cluster, out: Path) -> Result:
    """The containerd era's kubeadm configs through the real pinned kubeadm."""
    res = Result("kubeadm config (real kubeadm)", "kubeadm config validate + init --dry-run, the pinned kubeadm")
    outcome = check(cluster, out)
    res.checked, res.problems, res.notes = outcome.checked, outcome.problems, outcome.notes
    return res


def would_run(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    kubeadm = pinned_tools.binary(TOOL, PROGRAM) or Path(PROGRAM)
    lines = []
    for config in configs(cluster, out):
        path = out / config.label if config.init else Path(f"$TMP/<{config.label}>.yaml")
        if config.scaling:
            path = Path(f"$TMP/<{config.label}, patches.directory {out / control_plane.PATCHES_OUT_DIR}>.yaml")
        lines.append(shlex.join(validate_command(kubeadm, path)))
        if config.init:
            lines.append(f"{DRY_RUN_DIR_ENV}=$TMP/dry-run " + shlex.join(dry_run_command(kubeadm, path)))
    return lines or ["# no kubeadm v1beta4 config in this cluster: nothing for the real kubeadm to read"]
