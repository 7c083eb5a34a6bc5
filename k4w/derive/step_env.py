"""The step variables of a box: every value its guest steps read, computed once and named once.

Guest scripts (guest/<family>/**) are static files that take every value from the environment
of the Packer provisioner that runs them (docs/internals.md, "Step variables"). This module is
the one place that names those variables and computes their values; the Packer templates only
serialise the result (`<< step_env.environment_vars | json >>`). Every name is spelt out here
and in the script that reads it, so `grep -r K4W_FLANNEL_FILE` finds both ends, and
tests/derive/test_step_variables.py checks that a box gets exactly the names its scripts read.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from k4w.media import build_media as media
from k4w.derive import containerd_config, images, registry
from k4w.infra import sources
from k4w.model.config import Config
from k4w.derive.values import Proxy, apt_proxy_conf, proxy_env
from k4w.infra.errors import K4wError
from k4w.infra.packer_hcl import var_ref as hcl_var_ref
from k4w.model.profiles import Profile

if TYPE_CHECKING:  # the resolved model: k4w.derive.cluster imports what this module does, never this module
    from k4w.derive.cluster import Cluster

UBUNTU = "ubuntu"
WINDOWS = "windows"
FAMILIES = (UBUNTU, WINDOWS)

# Where templates/packer/ubuntu.pkr.hcl.j2 uploads guest/ubuntu/lib.sh; every step sources $K4W_LIB.
LIB_PATH = "/tmp/k4w-lib.sh"
# Where templates/packer/windows.pkr.hcl.j2 uploads guest/windows/common.ps1: Packer runs each
# script from its own random temp path, so the scripts find the helpers through $env:K4W_COMMON.
# 12-cleanup.ps1 deletes it at the end.
COMMON_PATH = "C:\\Windows\\Temp\\k4w-common.ps1"
# The Windows node folder (docs/internals.md, "Windows box <-> cluster-up").
NODE_DIR = "C:\\k"


# The Windows node services of a profile that names no node_services (the seed era), in start order.
SEED_NODE_SERVICES = ("kubelet", "flanneld", "kube-proxy")


def node_services(profile: Profile) -> list[str]:
    """The Windows services a box registers (08-node-services.ps1), in start order after its runtime."""
    value = profile.data.get("node_services") or ",".join(SEED_NODE_SERVICES)
    return [name.strip() for name in str(value).split(",") if name.strip()]


def node_service_dependencies(profile: Profile) -> dict[str, str]:
    """Each service a box registers -> the one it starts after (08-node-services.ps1 DependOnService):
    the container runtime first, then the service before it."""
    order = [profile.container_runtime, *node_services(profile)]
    return dict(zip(order[1:], order[:-1]))


@dataclass(frozen=True)
class FromProfile:
    """A step variable whose value is one key of the box profile."""

    key: str  # dotted path in boxes/<box>.yml
    families: tuple[str, ...] = FAMILIES  # whose guest steps read it
    default: object = None  # when the profile leaves the key out; None = the variable is not set


# Step variable -> profile key. One table for every family, so a profile key always reaches the
# guest under the same name. A key the profile leaves null is not set at all (Windows drops an
# empty variable anyway), so a step that needs it fails naming it.
PROFILE_VARIABLES: dict[str, FromProfile] = {
    "K4W_BOX": FromProfile("name"),
    "K4W_KUBE_VERSION": FromProfile("kubernetes.version", (UBUNTU,)),
    "K4W_KUBEADM_API": FromProfile("kubernetes.kubeadm_api", (UBUNTU,)),
    "K4W_KUBE_IMAGE_REPOSITORY": FromProfile("kubernetes.image_repository", (UBUNTU,)),
    "K4W_KUBE_PREPULL_IMAGES": FromProfile("kubernetes.prepull_images", (UBUNTU,), default=False),
    "K4W_FREE_SPACE": FromProfile("build.free_space", (UBUNTU,), default="trim-or-zero"),
    "K4W_BUILD_GENERATION": FromProfile("build.generation", (WINDOWS,)),
    "K4W_OS_BUILD": FromProfile("guest.os_build", (WINDOWS,)),
    "K4W_IMAGE_SERVERCORE": FromProfile("images.servercore", (WINDOWS,)),
    "K4W_IMAGE_NANOSERVER": FromProfile("images.nanoserver", (WINDOWS,)),
    # The HostProcess DaemonSets' base image (containerd era), pre-pulled like the others.
    "K4W_IMAGE_HOSTPROCESS": FromProfile("hostprocess.image", (WINDOWS,)),
    "K4W_PAUSE_IMAGE": FromProfile("kubernetes.pause_image"),
    "K4W_KUBE_CRI_SOCKET": FromProfile("kubernetes.cri_socket", (UBUNTU,)),
    # For the containerd era: the runtime's endpoint and the CNI folders (which runtime a box has is
    # K4W_CONTAINER_RUNTIME, derived from its components by Profile.container_runtime).
    "K4W_RUNTIME_ENDPOINT": FromProfile("runtime.endpoint", (WINDOWS,)),
    "K4W_CNI_BIN_DIR": FromProfile("runtime.cni_bin_dir", (WINDOWS,)),
    "K4W_CNI_CONF_DIR": FromProfile("runtime.cni_conf_dir", (WINDOWS,)),
    "K4W_KUBELET_LAUNCHER": FromProfile("kubernetes.kubelet_launcher", (WINDOWS,)),
    # The Windows services 08-node-services.ps1 registers, in start order after the runtime: the seed
    # era's three; the containerd era's kubelet alone (its flanneld and kube-proxy are HostProcess
    # DaemonSets, templates/manifests/windows-containerd/).
    "K4W_NODE_SERVICES": FromProfile("node_services", (WINDOWS,), default=",".join(SEED_NODE_SERVICES)),
    # components: what each download is and how it is verified
    "K4W_KUBERNETES_VERSION": FromProfile("components.kubernetes.version"),
    "K4W_KUBERNETES_SHA256": FromProfile("components.kubernetes.sha256"),
    "K4W_KUBERNETES_SHA512": FromProfile("components.kubernetes.sha512"),
    "K4W_DOCKER_VERSION": FromProfile("components.docker.version"),
    "K4W_DOCKER_SHA256": FromProfile("components.docker.sha256", (WINDOWS,)),
    "K4W_DOCKER_SHA512": FromProfile("components.docker.sha512", (WINDOWS,)),
    "K4W_DOCKER_PACKAGE": FromProfile("components.docker.package", (UBUNTU,)),
    "K4W_DOCKER_PACKAGE_VERSION": FromProfile("components.docker.package_version", (UBUNTU,)),
    "K4W_DOCKER_APT_URL": FromProfile("components.docker.apt_url", (UBUNTU,)),
    "K4W_DOCKER_APT_SUITE": FromProfile("components.docker.apt_suite", (UBUNTU,)),
    "K4W_DOCKER_APT_COMPONENT": FromProfile("components.docker.apt_component", (UBUNTU,)),
    "K4W_DOCKER_GPG_URL": FromProfile("components.docker.gpg_url", (UBUNTU,)),
    "K4W_DOCKER_GPG_FINGERPRINT": FromProfile("components.docker.gpg_fingerprint", (UBUNTU,)),
    "K4W_DOCKER_CGROUP_DRIVER": FromProfile("components.docker.cgroup_driver", (UBUNTU,)),
    "K4W_DOCKER_STORAGE_DRIVER": FromProfile("components.docker.storage_driver", (UBUNTU,)),
    "K4W_CONTAINERD_VERSION": FromProfile("components.containerd.version"),
    "K4W_CONTAINERD_SHA256": FromProfile("components.containerd.sha256"),
    "K4W_CONTAINERD_SHA512": FromProfile("components.containerd.sha512"),
    "K4W_CONTAINERD_CGROUP_DRIVER": FromProfile("components.containerd.cgroup_driver", (UBUNTU,)),
    "K4W_RUNC_VERSION": FromProfile("components.runc.version", (UBUNTU,)),
    "K4W_RUNC_SHA256": FromProfile("components.runc.sha256", (UBUNTU,)),
    "K4W_RUNC_SHA512": FromProfile("components.runc.sha512", (UBUNTU,)),
    "K4W_CNI_VERSION": FromProfile("components.cni.version"),
    "K4W_CNI_SHA256": FromProfile("components.cni.sha256"),
    "K4W_CNI_SHA512": FromProfile("components.cni.sha512"),
    "K4W_FLANNEL_VERSION": FromProfile("components.flannel.version", (WINDOWS,)),
    "K4W_FLANNEL_SHA256": FromProfile("components.flannel.sha256", (WINDOWS,)),
    "K4W_FLANNEL_SHA512": FromProfile("components.flannel.sha512", (WINDOWS,)),
    "K4W_CRICTL_VERSION": FromProfile("components.crictl.version", (WINDOWS,)),
    "K4W_CRICTL_SHA256": FromProfile("components.crictl.sha256", (WINDOWS,)),
    "K4W_CRICTL_SHA512": FromProfile("components.crictl.sha512", (WINDOWS,)),
    "K4W_FLANNEL_CNI_VERSION": FromProfile("components.flannel_cni.version", (WINDOWS,)),
    "K4W_FLANNEL_CNI_SHA256": FromProfile("components.flannel_cni.sha256", (WINDOWS,)),
    "K4W_FLANNEL_CNI_SHA512": FromProfile("components.flannel_cni.sha512", (WINDOWS,)),
    "K4W_NSSM_VERSION": FromProfile("components.nssm.version", (WINDOWS,)),
    "K4W_NSSM_SHA256": FromProfile("components.nssm.sha256", (WINDOWS,)),
    "K4W_NSSM_SHA512": FromProfile("components.nssm.sha512", (WINDOWS,)),
    # The pinned cumulative update (02-windows-update.ps1) and the patch level it brings: the
    # step skips a box already at that UBR, and 11-box-release.ps1 fails a box below it.
    "K4W_WINDOWS_UPDATE_VERSION": FromProfile("components.windows_update.version", (WINDOWS,)),
    "K4W_WINDOWS_UPDATE_SHA256": FromProfile("components.windows_update.sha256", (WINDOWS,)),
    "K4W_WINDOWS_UPDATE_SHA512": FromProfile("components.windows_update.sha512", (WINDOWS,)),
    "K4W_WINDOWS_UPDATE_UBR": FromProfile("components.windows_update.ubr", (WINDOWS,)),
}

# Step variable -> the component whose build-media file name it holds (k4w.media.build_media.media_name):
# where the guest finds the verified file that build-* staged in OUT/http/<box>/components/, on
# the build CD (Windows) or Packer's HTTP server (Ubuntu). Set when the profile gives the
# component a url.
MEDIA_VARIABLES: dict[str, tuple[str, tuple[str, ...]]] = {
    "K4W_KUBERNETES_FILE": ("kubernetes", FAMILIES),
    "K4W_DOCKER_FILE": ("docker", (WINDOWS,)),
    "K4W_CNI_FILE": ("cni", FAMILIES),
    "K4W_CONTAINERD_FILE": ("containerd", FAMILIES),
    "K4W_RUNC_FILE": ("runc", (UBUNTU,)),
    "K4W_FLANNEL_FILE": ("flannel", (WINDOWS,)),
    "K4W_NSSM_FILE": ("nssm", (WINDOWS,)),
    "K4W_FLANNEL_CNI_FILE": ("flannel_cni", (WINDOWS,)),
    "K4W_CRICTL_FILE": ("crictl", (WINDOWS,)),
    "K4W_WINDOWS_UPDATE_FILE": ("windows_update", (WINDOWS,)),
}


@dataclass(frozen=True)
class StepEnv:
    """The environment of every guest step of one box build."""

    env: dict[str, str]
    # Packer user variable -> its value. A value that may hold credentials reaches env only as a
    # reference to one of these (${var.name} once rendered); the template declares them sensitive, so Packer
    # masks them wherever they appear in its output.
    secrets: dict[str, str]

    @property
    def environment_vars(self) -> list[str]:
        """env as Packer's environment_vars list."""
        return [f"{name}={value}" for name, value in self.env.items()]

    @property
    def secret_environment(self) -> dict[str, str]:
        """What the build runner puts into Packer's environment: the templates read each secret
        variable's default from there (env("K4W_SECRET_...")), so no credential is written to packer/*.pkr.hcl."""
        return {secret_env_name(name): value for name, value in self.secrets.items()}

    def resolved(self, text: str) -> str:
        """text with each reference replaced by its secret's value: what the guest receives."""
        for variable, value in self.secrets.items():
            text = text.replace(_packer_ref(variable), value)
        return text

    def ref(self, variable: str) -> str:
        """The Packer reference to one of secrets, for template text outside the environment."""
        if variable not in self.secrets:
            raise K4wError(f"no Packer variable {variable!r} for this box (known: {', '.join(self.secrets) or 'none'})")
        return _packer_ref(variable)


_FAMILY_CONSTANTS = {
    UBUNTU: {"DEBIAN_FRONTEND": "noninteractive", "K4W_LIB": LIB_PATH},
    WINDOWS: {"K4W_COMMON": COMMON_PATH, "K4W_NODE_DIR": NODE_DIR},
}


def step_env(profile: Profile, cluster: Cluster) -> StepEnv:
    """Every variable the guest steps of this box read, with its value: the proxy as the resolved
    model derived it (cluster.proxy), the mirrors from its config."""
    family = profile.os_family
    if family not in FAMILIES:
        raise K4wError(f"{profile.path}: no guest steps for os_family {family!r} (known: {', '.join(FAMILIES)})")
    env = dict(_FAMILY_CONSTANTS[family])
    if family == WINDOWS:
        env["K4W_PROFILE"] = _profile_location(profile)
    else:
        # Where Packer's HTTP server has the build media (lib.sh k4w_component_file).
        env["K4W_MEDIA_URL_PATH"] = media.url_path(profile)
    env.update(_from_profile(profile, family))
    env.update(_media_files(profile, family))
    env["K4W_RELEASE_JSON"] = json.dumps(release_record(profile))
    # Which runtime the box has (docker or containerd): the service that gets the build's proxy
    # and the node services start after, on both families.
    env["K4W_CONTAINER_RUNTIME"] = profile.container_runtime
    # The `version` of the config.toml 03-containerd writes (k4w/derive/containerd_config.py says why). Set
    # for every box, as the family's steps read it; empty on a Docker box, which writes no such file.
    env["K4W_CONTAINERD_CONFIG_VERSION"] = (str(containerd_config.CONFIG_VERSION)
                                            if env["K4W_CONTAINER_RUNTIME"] == "containerd" else "")
    secrets: dict[str, str] = {}
    env.update(_proxy_variables(cluster.proxy, family, secrets))
    env.update(_registry_variables(cluster.config, profile, secrets))
    env["K4W_IMAGE_IMPORTS"] = image_imports(cluster.config, profile)
    # Profile extras, e.g. the CI profile's K4W_SKIP_KUBERNETES=1 (named in the profile itself).
    env.update({name: _text(value) for name, value in (profile.data.get("provision_env") or {}).items()})
    return StepEnv(env=env, secrets=secrets)


def release_record(profile: Profile) -> dict:
    """The build record the box writes inside the guest (docs/internals.md, "Profile conventions")."""
    components = profile.data.get("components") or {}
    return {"box": profile.name, "components": {name: str(spec.get("version")) for name, spec in components.items()}}


def _profile_location(profile: Profile) -> str:
    """The profile as the guest's error messages name it: relative to the repository when it is in it."""
    try:
        return profile.path.relative_to(sources.REPO.root).as_posix()
    except ValueError:
        return str(profile.path)


_MISSING = object()


def _lookup(data: dict, dotted: str):
    value = data
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


def _text(value) -> str:
    """A profile value as the guest reads it: YAML booleans as 1/0, numbers as written."""
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


# Component keys that document a value for people and the validators, never for a guest step
# (windows_update.released: the plan's age of the patch level, k4w/model/patch_level.py).
DOCUMENTATION_KEYS = ("checksum_source", "released")
# Component keys only the host reads: k4w.bake.fetch downloads `url` (or its mirror) and reads a
# `sha256_url` into the host cache; the guest gets the file from the build media instead
# (MEDIA_VARIABLES) and checks it against the digest the profile pins.
HOST_KEYS = ("url", "sha256_url")
# Component keys that name the file on the build media (k4w.media.build_media.media_name), which reaches
# the guest as the media variable, never as a value of its own.
MEDIA_KEYS = ("media_file",)


def _from_profile(profile: Profile, family: str) -> dict[str, str]:
    named = {spec.key for spec in PROFILE_VARIABLES.values()}
    for component, spec in (profile.data.get("components") or {}).items():
        for key in spec:
            if key not in DOCUMENTATION_KEYS + HOST_KEYS + MEDIA_KEYS and f"components.{component}.{key}" not in named:
                raise K4wError(
                    f"{profile.path}: components.{component}.{key} reaches no guest step: name its step variable "
                    "in k4w/derive/step_env.py PROFILE_VARIABLES (and read it in the step that needs it)"
                )
    env = {}
    for name, spec in PROFILE_VARIABLES.items():
        if family not in spec.families:
            continue
        value = _lookup(profile.data, spec.key)
        if value is _MISSING:
            value = spec.default
        if value is not None:
            env[name] = _text(value)
    return env


def _media_files(profile: Profile, family: str) -> dict[str, str]:
    files = media.box_files(profile)
    known = {component for component, _ in MEDIA_VARIABLES.values()}
    unnamed = sorted(set(files) - known)
    if unnamed:
        raise K4wError(f"{profile.path}: components.{unnamed[0]} is downloaded but no step variable names its build-media "
                       "file: add it to k4w/derive/step_env.py MEDIA_VARIABLES (and read it in the step that installs it)")
    return {name: files[component] for name, (component, families) in MEDIA_VARIABLES.items()
            if family in families and component in files}


# The Packer templates read each secret input variable's default from the environment, with
# env("K4W_SECRET_<NAME>"): HCL2 allows env() in a variable's default only (hashicorp/packer@v1.9.4
# (ae9daec1) hcl2template/types.packer_config.go decodeInputVariables: the only context with env).
SECRET_ENV_PREFIX = "K4W_SECRET_"


def secret_env_name(variable: str) -> str:
    """The environment variable the Packer templates read a secret user variable from."""
    return SECRET_ENV_PREFIX + variable.upper()


def _packer_ref(variable: str) -> str:
    # The templates' `hcl` filter writes this marker as ${var.<variable>} (k4w.render.escape).
    return hcl_var_ref(variable)


def _blank_separated(pairs: dict[str, str]) -> str:
    """NAME=value pairs in one variable. Once Packer has filled in its references no value holds
    a blank: k4w.model.config allows none in a proxy URL or a NO_PROXY entry."""
    return " ".join(f"{name}={value}" for name, value in pairs.items())


def _proxy_variables(proxy: Proxy, family: str, secrets: dict[str, str]) -> dict[str, str]:
    """The proxy as each family's steps take it. URLs (which may carry credentials) reach the
    guest only as references to sensitive Packer variables, recorded in secrets."""

    def secret(variable: str, value: str | None) -> str | None:
        if not value:
            return None
        secrets[variable] = value
        return _packer_ref(variable)

    http = secret("http_proxy", proxy.http)
    https = secret("https_proxy", proxy.https)
    pairs = proxy_env(http, https, proxy.no_proxy_str if proxy.enabled else None)
    if family == UBUNTU:
        return {
            # For /etc/environment and the services' systemd drop-ins.
            "K4W_PROXY_ENV": _blank_separated(pairs),
            "K4W_APT_PROXY_CONF": apt_proxy_conf(http, https),
            "K4W_PROXY_FILE_MODE": proxy.file_mode,
            # The steps' own downloads (curl, apt) go through the proxy too.
            **pairs,
        }
    # Windows environment names ignore case: one variable serves HTTP_PROXY and http_proxy.
    single_case = {name: value for name, value in pairs.items() if name.isupper()}
    env = {
        "K4W_PROXY_ENABLED": "1" if proxy.enabled else "0",
        "K4W_PROXY_ENV": _blank_separated(single_case),
    }
    if proxy.enabled:
        env["K4W_NO_PROXY"] = proxy.no_proxy_str
    # WinHTTP, WinINet and Invoke-WebRequest take host:port and the credentials separately. The
    # credentials stay percent-encoded as in cluster.yml: Packer would read a decoded '{{' as its
    # own template syntax.
    servers = (
        (proxy.http_server, "K4W_HTTP_PROXY_HOSTPORT",
         "K4W_HTTP_PROXY_USER", "http_proxy_user", "K4W_HTTP_PROXY_PASSWORD", "http_proxy_password"),
        (proxy.https_server, "K4W_HTTPS_PROXY_HOSTPORT",
         "K4W_HTTPS_PROXY_USER", "https_proxy_user", "K4W_HTTPS_PROXY_PASSWORD", "https_proxy_password"),
    )
    for server, host_port, user, user_variable, password, password_variable in servers:
        if server:
            env[host_port] = server.host_port
            env[user] = secret(user_variable, server.user)
            env[password] = secret(password_variable, server.password)
    return {name: value for name, value in env.items() if value is not None}


def _registry_variables(cfg: Config, profile: Profile, secrets: dict[str, str]) -> dict[str, str]:
    """The image mirrors (k4w.derive.registry) as the runtime step of the box takes them: containerd's
    certs.d tree and its credentials drop-in (03-containerd), Docker's registry-mirrors (03-docker).
    Each is set for every box, empty when there is nothing to write, so a step also removes what an
    earlier build wrote. A Docker box never gets credentials: k4w.model.config refuses them for that era."""
    docker = {"K4W_DOCKER_REGISTRY_MIRRORS": " ".join(registry.docker_registry_mirrors(cfg))}
    if profile.container_runtime == "docker":
        return {**docker, "K4W_REGISTRY_FILES": "", "K4W_REGISTRY_AUTH": ""}
    auth = registry.auth_toml(cfg)
    if auth:
        # Base64, because the drop-in has several lines; a sensitive Packer variable, because it
        # holds the passwords (Packer masks it in its output, and no template holds it).
        secrets["registry_auth"] = base64.b64encode(auth.encode("utf-8")).decode("ascii")
    return {
        **docker,
        "K4W_REGISTRY_FILES": registry.encode_files(registry.certs_d(cfg)),
        "K4W_REGISTRY_AUTH": _packer_ref("registry_auth") if auth else "",
    }


def image_imports(cfg: Config, profile: Profile) -> str:
    """The images a box imports from the build host (downloads.images: cache, images.imported), as
    blank-separated <name>@<pinned manifest digest>, the name as the CRI stores it (registry.stored_name;
    Docker takes it for the same image: moby v17.03.2-ce reference/reference.go normalize drops docker.io/
    and library/): the guest takes image_cache.archive_name(digest) from
    Packer's HTTP server (Ubuntu) or the build CD (Windows) and checks the imported name points at that
    digest (containerd), or at the config that digest's manifest names (Docker, which keeps no manifest).
    Empty otherwise, and for an image with no pin (the build refuses such a box before Packer starts)."""
    if not images.imported(cfg, profile):
        return ""
    digests = profile.data.get("image_digests") or {}
    return " ".join(f"{registry.stored_name(name)}@{digests[name]}" for name in images.box_images(profile) if digests.get(name))


def node_proxy_variables(proxy: Proxy, family: str) -> dict[str, str]:
    """The proxy variables a family's steps read, with real values in place of Packer's
    references: what cluster-up gives a node's cluster-proxy script, where no Packer is involved.
    proxy: the resolved model's (k4w.derive.cluster.Cluster.proxy)."""
    secrets: dict[str, str] = {}
    env = _proxy_variables(proxy, family, secrets)
    steps = StepEnv(env=env, secrets=secrets)
    return {name: steps.resolved(text) for name, text in env.items()}


def node_registry_variables(cfg: Config, profile: Profile) -> dict[str, str]:
    """The image mirrors as cluster-up gives them to a containerd node's cluster-proxy script (the
    box carries the bake's hosts.toml files but no credentials): real values, no Packer references.
    Nothing for a Docker box, whose daemon.json mirror the bake wrote and which holds no secret."""
    if profile.container_runtime == "docker":
        return {}
    secrets: dict[str, str] = {}
    env = _registry_variables(cfg, profile, secrets)
    steps = StepEnv(env=env, secrets=secrets)
    return {name: steps.resolved(env[name]) for name in ("K4W_REGISTRY_FILES", "K4W_REGISTRY_AUTH")}
