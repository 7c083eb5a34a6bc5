"""Check every rendered artifact with the program that will consume it (docs/verification.md).

The rules, in the order a run shows them. Each names its module of this package, which exports
`run(cluster, out) -> Result` (the check of a rendered OUT) and, beside it, `would_run(cluster, out,
rendered) -> list[str]` (the commands a dry run shows instead, from the in-memory render's file names,
since OUT is not written then). A module is imported when its rule runs, as each imports its tools.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Callable

from k4w.derive.cluster import Cluster
from k4w.infra.errors import K4wError
from k4w.infra.errors import ToolMissing
from .result import Result

__all__ = ["Result", "VALIDATORS", "Validator", "validate_all", "would_run"]


@dataclass(frozen=True)
class Validator:
    """One consumer of the artifacts: the rule module of this package that holds its check and its dry run.
    name is what a user reads when the check cannot run here (the build gate's and doctor's "not validated
    on this host: NAME"), kept as it was before the checks moved into their rule modules."""

    name: str
    module: str

    def rule(self) -> ModuleType:
        return importlib.import_module(f"{__name__}.{self.module}")

    def check(self, cluster: Cluster, out: Path) -> Result:
        return self.rule().run(cluster, out)

    def would_run(self, cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
        return self.rule().would_run(cluster, out, rendered)


VALIDATORS: list[Validator] = [Validator(name, module) for name, module in (
    ("packer_templates", "packer_rules"),  # packer init + packer validate
    ("packer_enums", "packer_option_rules"),  # the hyperv builders' enumerated options, windows-restart
    ("preseeds", "preseed_rules"),  # debconf-set-selections --checkonly
    ("cloud_configs", "cloud_config_rules"),  # cloud-init schema on user-data
    ("autoinstall_seeds", "autoinstall_rules"),  # subiquity's autoinstall schema
    ("shell_scripts", "shellcheck_rules"),  # shellcheck on every bash script
    ("powershell_scripts", "ps51_rules"),  # PowerShell parse, lint and the 5.1 rules
    ("unattend_files", "unattend_rules"),  # Autounattend.xml
    ("manifests", "manifest_rules"),  # kubernetes-validate and agreement of manifests and node configs
    ("kubeadm_config", "kubeadm_config_rules"),  # kubeadm config fields, every worker's join configuration
    ("real_kubeadm", "kubeadm_real"),  # the real pinned kubeadm on the containerd era's configs
    ("pinned_flags", "proxy_mode_rules"),  # the pinned binaries' flags and kube-proxy's mode
    ("checksum_sources", "checksum_rules"),  # box profile checksums name their source
    ("windows_preflight", "preflight_rules"),  # kubeadm's Windows SystemVerification
    ("cni_versions", "cni_rules"),  # Windows cniVersion
    ("windows_images", "windows_image_rules"),  # Windows container images per build
    ("windows_patch_level", "patch_rules"),  # Windows patch level
    ("cgroup_v2", "cgroup_rules"),  # cgroup v2 only boxes
    ("registry_mirrors", "registry_rules"),  # registry mirrors' hosts.toml, containerd config dump
    ("containerd_config_versions", "containerd_config_rules"),  # containerd config versions
    ("unit_credentials", "systemd_unit_rules"),  # no credential in a unit's Environment=
    ("apt_locks", "apt_rules"),  # apt through k4w_apt
    ("yaml_templates", "yaml_template_rules"),  # every YAML template value quoted
    ("hcl_templates", "hcl_template_rules"),  # every Packer template value quoted
    ("vagrantfiles", "vagrantfile_rules"),  # ruby -c on the Vagrantfiles
    ("cluster_vagrantfile", "vagrant_rules"),  # vagrant validate on the cluster Vagrantfile
)]


def validate_all(cluster: Cluster, out: Path, report: Callable[[Result], None] | None = None) -> list[Result]:
    """Run every validator on an already rendered out dir. A missing tool is a failed result."""
    results = []
    for validator in VALIDATORS:
        started = time.monotonic()
        try:
            res = validator.check(cluster, Path(out))
        except ToolMissing as exc:
            res = Result(validator.name, exc.tool, problems=[str(exc)], missing_tool=exc.tool)
        except K4wError as exc:
            res = Result(validator.name, "-", problems=[str(exc)])
        res.seconds = time.monotonic() - started
        results.append(res)
        if report:
            report(res)
    return results


def would_run(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    """Every command validate_all would run on OUT once `rendered` is written there, in order."""
    return [line for validator in VALIDATORS for line in validator.would_run(cluster, Path(out), rendered)]
