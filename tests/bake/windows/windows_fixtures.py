"""Shared values and helpers of the Windows box tests (imported by name: every test folder has
its own conftest.py, so this module has a unique name)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from k4w.model import config, profiles
from k4w.derive import values as derive
from k4w.infra import packer_hcl
from k4w.infra.sources import REPO_ROOT as ROOT

BOX = "windows-1803"
CONTAINERD_ERA_LINUX_BOX = "ubuntu-2404"  # the Linux nodes beside a containerd-era Windows worker
SECRET = "Zx9-k4w-test-secret-Qw7"
BOX_USER_SECRET = "Pq4-k4w-box-user-Vr2"  # the vagrant user's password of this k4w installation
PROXY_USER = "builder"
PROXY_PASSWORD = "Pr0xy-S3cret"
HTTP_PROXY = f"http://{PROXY_USER}:{PROXY_PASSWORD}@proxy.corp.example:3128"
HTTPS_PROXY = "http://secure-proxy.corp.example:8443"


@dataclass
class Rendered:
    cfg: config.Config
    files: dict[str, str]
    out: Path
    generation: int

    box: str = BOX

    @property
    def packer_text(self) -> str:
        return self.files[f"packer/{self.box}.pkr.hcl"]

    @property
    def packer(self) -> dict:
        return packer_hcl.parse(self.packer_text, root=self.out / "packer")

    @property
    def unattend(self) -> str:
        return self.files[f"http/{self.box}/Autounattend.xml"]

    @property
    def proxy(self) -> derive.Proxy:
        return derive.derive_proxy(self.cfg)

    @property
    def profile(self):
        return profiles.load(self.box).data

    @property
    def variables(self) -> dict[str, str]:
        """The template's user variables as a build gets them: the secrets from the environment
        the build runner gives Packer (StepEnv.secret_environment)."""
        from k4w.infra import packer_cli
        from k4w.derive.step_env import step_env
        from k4w.derive.cluster import Cluster

        environ = step_env(profiles.load(self.box), Cluster.resolve(self.cfg)).secret_environment
        return packer_cli.variable_values(self.packer, environ)

    def env(self, script: str) -> dict[str, str]:
        """environment_vars of the powershell provisioner running this script, as a dict."""
        for prov in self.packer["provisioners"]:
            if prov["type"] == "powershell" and Path(prov["script"]).name == script:
                return dict(item.split("=", 1) for item in prov["environment_vars"])
        raise AssertionError(f"no powershell provisioner runs {script}")


def cluster_config(http: str | None = None, https: str | None = None, no_proxy: list[str] | None = None,
                   box: str = BOX) -> config.Config:
    """cluster.yml with this proxy; box: the Windows worker's box. Another box than the default one is
    of the containerd era: it runs vxlan only, and its Linux nodes are that era's (ubuntu-2404), as the
    version-skew rule requires."""
    data = yaml.safe_load((ROOT / "cluster.yml").read_text())
    data["proxy"] = {"http": http, "https": https, "no_proxy": no_proxy or []}
    if box != BOX:
        data["network"]["backend"] = "vxlan"
        for node in data["nodes"]:
            node["box"] = box if node["box"] == BOX else CONTAINERD_ERA_LINUX_BOX
    return config.parse(yaml.safe_dump(data), "variant-cluster.yml")


