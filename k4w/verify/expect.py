"""What a built box must look like, derived from its profile and cluster.yml - never retyped.

Every version a spec compares comes from `boxes/<box>.yml`; every proxy value from
cluster.yml through k4w.derive.values.derive_proxy, exactly as the provisioning got them.
"""

from __future__ import annotations

import json
import re

import pytest

from ..bake import catalogue
from k4w.derive import step_env
from k4w.derive.cluster import Cluster
from k4w.infra.errors import K4wError
from k4w.model.profiles import Profile

# The Vagrant "insecure" public key every public box ships so `vagrant up` can log in the
# first time (github.com/hashicorp/vagrant keys/vagrant.pub, also in every Vagrant install
# under gems/vagrant-*/keys/). Only the key type and body are compared, not the comment.
VAGRANT_INSECURE_KEY = (
    "ssh-rsa AAAAB3NzaC1yc2EAAAABIwAAAQEA6NF8iallvQVp22WDkTkyrtvp9eWW6A8YVr+kz4TjGYe7gHzIw+niNltGEFHzD8+v1I2YJ6oXev"
    "ct1YeS0o9HZyN1Q9qgCgzUFtdOKLv6IedplqoPkcmF0aYet2PkEDo3MlTBckFXPITAMzF8dJSIFo9D8HfdOV0IAdx4O7PtixWKn5y2hMNG0zQPy"
    "Uecp4pzC6kivAIhyfHilFR61RGL+GPXQ2MWZWFYbAGjyiYJnAmCP3NOTd0jMZEnDkbUvxhMmBYSdETk1rRgm+R4LOzFUGaHqHDLKLX+FIPKcF96"
    "hrucXzcWyLbIbEgE98OHlnVYCzRdK8jlqm8tehUc9c9WhQ=="
)

# CNI plugins the Linux nodes need: Flannel's CNI config (kube-flannel.yml "cni-conf.json")
# chains `flannel` (which delegates to `bridge` + `host-local`) and `portmap` (hostPort);
# the kubelet itself always sets up `loopback` in every pod sandbox.
LINUX_CNI_PLUGINS = ("bridge", "host-local", "loopback", "portmap", "flannel")
# containernetworking/plugins dropped its flannel plugin in v1.0.0 (commit 77233dd7 "plugins: remove
# flannel"); Flannel's own manifest installs it from then on.
CNI_WITHOUT_FLANNEL = (1, 0, 0)

_VERSION = re.compile(r"v?(\d+\.\d+\.\d+)")


def components(profile: Profile) -> dict:
    comps = profile.data.get("components")
    if not comps:
        raise K4wError(f"{profile.path}: no 'components:' mapping; the spec compares the box with it")
    return comps


def component(profile: Profile, name: str, key: str = "version") -> str:
    """A component value from the profile, or an error naming the missing key."""
    value = (components(profile).get(name) or {}).get(key)
    if value in (None, ""):
        raise K4wError(f"{profile.path}: components.{name}.{key} is not set")
    return str(value)


def release_document(profile: Profile) -> dict:
    """The build record the box writes inside the guest (docs/internals.md, Profile conventions):
    exactly the profile's components, as the build record outside the guest lists them. A Windows
    box adds "os" ({"build", "ubr"}), the patch level it reached, which the spec compares with the
    running system (minimum_ubr), not with the profile."""
    return {"box": profile.name, "components": catalogue.components(profile)}


def minimum_ubr(profile: Profile) -> int | None:
    """The patch level a Windows box must have reached: the UBR its pinned cumulative update brings
    (components.windows_update.ubr) or, with none pinned, its ISO's (iso.ubr: k4w/model/patch_level.py);
    None for a box that records neither (windows-1803: docs/modern-stack.md "Patching")."""
    from k4w.model.patch_level import level

    found = level(profile)
    return None if found is None or found.ubr is None else int(found.ubr)


def reported_version(output: str) -> str | None:
    """The first x.y.z in a tool's version output: `Kubernetes v1.11.10` -> `1.11.10`."""
    match = _VERSION.search(output)
    return match.group(1) if match else None


def version_matches(actual: str, pinned: str) -> bool:
    """True when a reported version is the pinned one, allowing a vendor suffix after it.

    Docker reports its server version with the edition appended (`17.03.2-ce`, `17.06.2-ee-16`)
    while a profile pins the release; `17.03.2` must not match `17.03.20`.
    """
    actual, pinned = actual.strip().lstrip("v"), pinned.strip().lstrip("v")
    if actual == pinned:
        return True
    return actual.startswith(pinned) and not actual[len(pinned)].isalnum()


def authorized_keys_have(text: str, public_key: str = VAGRANT_INSECURE_KEY) -> bool:
    """Whether an authorized_keys text holds a key (type and body; options and comment ignored)."""
    kind, body = public_key.split()[:2]
    for line in text.splitlines():
        words = line.split()
        if kind in words and body in words:
            return True
    return False


def parse_env_assignments(text: str) -> dict[str, str]:
    """KEY=value lines as in /etc/environment or systemd Environment= (quotes removed)."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        out[key.strip()] = value
    return out


PROXY_KEYS = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")


def linux_cni_plugins(profile: Profile) -> tuple[str, ...]:
    """The CNI plugins the box's CNI release puts in /opt/cni/bin."""
    version = tuple(int(part) for part in (reported_version(component(profile, "cni")) or "0.0.0").split("."))
    return tuple(p for p in LINUX_CNI_PLUGINS if p != "flannel" or version < CNI_WITHOUT_FLANNEL)


def containerd_config_problems(text: str, profile: Profile, effective: bool = False) -> list[str]:
    """What a containerd config.toml lacks of the profile: the config version containerd reads
    without migrating it (k4w/derive/containerd_config.py), the pause image under the CRI images plugin's
    pinned_images.sandbox, runc's cgroup driver, the CNI dirs (containerd docs/cri/config.md at v2.3.7).

    effective: text is `containerd config dump`, containerd's own view after any migration (it
    always prints its own ConfigVersion, containerd@v2.3.7 cmd/containerd/command/config.go:76), so
    the version there says nothing about the file: only its settings are checked."""
    import tomllib

    from k4w.derive.containerd_config import CONFIG_VERSION

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return [f"not valid TOML: {exc}"]
    plugins = data.get("plugins") or {}
    images = plugins.get("io.containerd.cri.v1.images") or {}
    runtime = plugins.get("io.containerd.cri.v1.runtime") or {}
    runc = ((runtime.get("containerd") or {}).get("runtimes") or {}).get("runc") or {}
    cni = runtime.get("cni") or {}
    wanted_systemd = component(profile, "containerd", "cgroup_driver") == "systemd"
    checks = [
        (effective or data.get("version") == CONFIG_VERSION,
         f"version is {data.get('version')!r}, not {CONFIG_VERSION} (containerd 2.3 migrates an older schema at every start)"),
        ((images.get("pinned_images") or {}).get("sandbox") == str(profile.data.kubernetes.pause_image),
         f"pinned_images.sandbox is not {profile.data.kubernetes.pause_image}"),
        ((runc.get("options") or {}).get("SystemdCgroup") is wanted_systemd,
         f"runc's SystemdCgroup is not {str(wanted_systemd).lower()} (components.containerd.cgroup_driver)"),
        (cni.get("bin_dirs") == ["/opt/cni/bin"] and cni.get("conf_dir") == "/etc/cni/net.d",
         "the CNI dirs are not /opt/cni/bin and /etc/cni/net.d"),
        # The image mirrors' hosts.toml files live there (k4w/derive/registry.py, lib.sh k4w_configure_registry).
        ((images.get("registry") or {}).get("config_path") == "/etc/containerd/certs.d",
         "the registry hosts folder (registry.config_path) is not /etc/containerd/certs.d"),
    ]
    return [message for ok, message in checks if not ok]


# The CRI of containerd 2.x: the gRPC service the kubelet talks to and the two CRI plugins it is built
# on (containerd@v2.3.7 plugins/cri/cri.go, plugins/cri/images/plugin.go, plugins/cri/runtime/plugin.go:
# Type and ID of each registration), as `ctr plugins ls` lists them (TYPE ID PLATFORMS STATUS,
# cmd/ctr/commands/plugins/plugins.go at the same tag: STATUS ok, skip or error).
CRI_PLUGINS = (("io.containerd.grpc.v1", "cri"), ("io.containerd.cri.v1", "images"), ("io.containerd.cri.v1", "runtime"))


def cri_plugin_problems(listing: str) -> list[str]:
    """What `ctr plugins ls` shows wrong with the CRI: a plugin missing or not loaded ("ok")."""
    status = {}
    for line in listing.splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 4:
            status[(fields[0], fields[1])] = fields[-1]
    return [f"{kind}.{name} is {'not listed' if (kind, name) not in status else status[(kind, name)]}, not ok"
            for kind, name in CRI_PLUGINS if status.get((kind, name)) != "ok"]


def kubeadm_version_problems(output: str, wanted: str) -> list[str]:
    """What `kubeadm version -o json` shows wrong: its clientVersion (k8s.io/component-base
    version.Info, filled in at link time as upstream's hack/lib/version.sh does) must be the pinned
    release from a clean tree, built by a Go toolchain; a program that only prints a version line fails."""
    try:
        info = json.loads(output)["clientVersion"]
    except (ValueError, KeyError, TypeError) as exc:
        return [f"not kubeadm's version record ({type(exc).__name__}): {output.strip()[:120]!r}"]
    major, minor = wanted.split(".")[:2]
    problems = [f"{key} is {info.get(key)!r}, not {value!r}" for key, value in
                (("gitVersion", f"v{wanted}"), ("major", major), ("minor", minor), ("gitTreeState", "clean"))
                if info.get(key) != value]
    if not str(info.get("goVersion", "")).startswith("go"):
        problems.append(f"goVersion is {info.get('goVersion')!r}: not a Go build")
    return problems


def imported_image_id(config_path: str, digest: str) -> str:
    """The image ID Docker gives the image whose pinned manifest is `digest`: the sha256 of its config
    (moby v17.03.2-ce image/fs.go), read from the manifest in the build host's image cache, which the
    bake staged the image from."""
    from k4w.bake import image_cache

    cluster = Cluster.load(config_path)
    manifest = image_cache.blob_path(image_cache.cache_root(cluster), digest)
    try:
        return json.loads(manifest.read_bytes())["config"]["digest"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise K4wError(f"the manifest {digest} is not readable in the image cache ({manifest}): {exc}") from None


def parametrize_imported_images(metafunc) -> None:
    """One spec test per image the bake imported (downloads.images: cache): its name and pinned digest as the
    guest step received them (step_env.image_imports, with the k4w-pins.yml beside --k4w-config). A box that
    imports none reports the check as not applicable, never as passed."""
    path, box = metafunc.config.getoption("--k4w-config"), metafunc.config.getoption("--k4w-box")
    entries = []
    if path and box:
        cluster = Cluster.load(path)
        entries = step_env.image_imports(cluster.config, cluster.profile(box)).split()
    params = [pytest.param(entry, id=entry.rsplit("@", 1)[0]) for entry in entries] or [pytest.param(
        None, id="none", marks=pytest.mark.k4w_deselect("this box imports no image (downloads.images is registry, or the box "
                                                         "pulls its own: docs/downloads.md)"))]
    metafunc.parametrize("imported_image", params)
