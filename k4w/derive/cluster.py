"""One cluster, resolved once per command: everything a stage needs to know about cluster.yml.

A command loads its config file into a Cluster at its entry point and hands that object down.
Rendering, planning, validation, the build and cluster-up then read the same validated config,
the same box profiles, the same derived network and proxy and the same Kubernetes era, and no
stage re-loads or re-derives any of them. The proxy is Cluster.proxy; a box's Kubernetes version and
container runtime are Profile.kubernetes_version and Profile.container_runtime, the cluster's are
Kube.version / version_tag / minor and Kube.runtime (tests/config/test_one_source.py names a module
that works one of them out again).

It sits in derive/, not model/: it holds what is derived from cluster.yml and the box profiles,
the data k4w.cluster (the cluster-up stage) and every other stage work from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from k4w.model import config as config_mod, kubeadm_timeouts, profiles
from k4w.infra import sources as sources_mod
from k4w.derive import control_plane as control_plane_mod, registry
from k4w.model.config import Config
from k4w.derive.values import Network, Proxy, derive_network, derive_proxy
from k4w.infra.errors import K4wError
from k4w.model.profiles import Profile
from k4w.model.version_skew import minor as version_minor


@dataclass(frozen=True)
class Kube:
    """Era-dependent Kubernetes facts, taken from the master's profile."""

    version: str  # without a leading "v" (Profile.kubernetes_version), e.g. 1.37.2
    kubeadm_api: str
    os_label: str
    pause_image: str
    image_repository: str
    cgroup_driver: str | None
    flannel_image: str | None
    # The container runtime component whose cgroup_driver the kubelet must share (docker, containerd).
    runtime: str = "docker"
    cri_socket: str | None = None  # kubeadm's nodeRegistration.criSocket; None: kubeadm detects it
    # Which templates/manifests/flannel/<name>.yaml.j2 renders kube-flannel.yaml (the era's shape).
    flannel_manifest: str | None = None
    flannel_cni_plugin_image: str | None = None  # the init image that installs Flannel's CNI binary
    # kube-proxy's mode in the rendered KubeProxyConfiguration (kubernetes.kube_proxy_mode); None: the seed
    # era's kubeadm config, which leaves it to kube-proxy's default.
    kube_proxy_mode: str | None = None

    @property
    def version_tag(self) -> str:
        """The version as Kubernetes' release tags and kubeadm's kubernetesVersion spell it: v1.37.2."""
        return f"v{self.version}"

    @property
    def minor(self) -> tuple[int, int]:
        """(major, minor), e.g. (1, 37): what API and flag rules compare against."""
        return version_minor(self.version)


def kube_era(master: Profile) -> Kube:
    """Taken from the master's profile: the images its box pre-pulled are the ones kubeadm must use."""
    data = master.data
    k = data.kubernetes
    components = data.get("components", {})
    runtime = master.container_runtime
    return Kube(
        version=master.kubernetes_version,
        kubeadm_api=k.kubeadm_api,
        os_label=k.node_os_label,
        pause_image=k.get("pause_image", ""),
        image_repository=k.get("image_repository", "registry.k8s.io"),
        # None when a profile lacks them; the templates and checks that need them fail naming the key.
        cgroup_driver=(components.get(runtime) or {}).get("cgroup_driver"),
        flannel_image=k.get("flannel_image"),
        runtime=runtime,
        cri_socket=k.get("cri_socket"),
        flannel_manifest=k.get("flannel_manifest"),
        flannel_cni_plugin_image=k.get("flannel_cni_plugin_image"),
        kube_proxy_mode=k.get("kube_proxy_mode"),
    )


@dataclass(frozen=True)
class Cluster:
    config: Config
    profiles: Mapping[str, Profile]  # every box a node uses, by name, in first-use order
    network: Network
    proxy: Proxy
    kube: Kube
    sources: sources_mod.Sources
    # The config file it was read from: user pins (k4w-pins.yml) live next to it. None for a
    # config built in memory, which then has no pins.
    config_file: Path | None = None

    @classmethod
    def load(cls, path: str | Path) -> "Cluster":
        """Read and validate a config file, then resolve it (a command's first step)."""
        return cls.resolve(config_mod.load(path), config_file=Path(path))

    @classmethod
    def resolve(cls, cfg: Config, config_file: Path | None = None) -> "Cluster":
        """Resolve an already validated config against the current source tree, with the user's
        pins (next to config_file) filled into the box profiles."""
        from k4w.model import pins as pins_mod

        user_pins = pins_mod.load(config_file) if config_file else {}
        # Then the Kubernetes images under their registry's mirror (k4w.derive.registry.apply), so every
        # stage names the pause image and kubeadm's image repository the same way.
        boxes = {box: registry.apply(pins_mod.apply(profiles.load(box), user_pins), cfg) for box in cfg.boxes()}
        return cls(
            config=cfg,
            profiles=MappingProxyType(boxes),
            network=derive_network(cfg),
            proxy=derive_proxy(cfg),
            kube=kube_era(boxes[cfg.era_node.box]),
            sources=sources_mod.REPO,
            config_file=config_file,
        )

    @property
    def windows_demo_image(self) -> str | None:
        """The Server Core image the Windows demo runs: the one the Windows nodes' box pre-pulled
        (images.servercore). A process-isolated container must match the host's build (Microsoft,
        "Windows container version compatibility"), so a 2022 node cannot run the 1803 image. None
        without a Windows node; a cluster whose Windows boxes pull different images is refused,
        since the one demo Deployment could then run on only some of its nodes."""
        return self._windows_image("servercore", "Server Core")

    @property
    def windows_nanoserver_image(self) -> str | None:
        """The Nano Server image of the demo's volume check (images.nanoserver, pre-pulled by the
        box like Server Core): its default user is ContainerUser, not an administrator."""
        return self._windows_image("nanoserver", "Nano Server")

    def _windows_image(self, key: str, what: str) -> str | None:
        images = {}
        for node in self.config.nodes:
            prof = self.profile(node.box)
            image = (prof.data.get("images") or {}).get(key) if prof.is_windows else None
            if image:  # a Windows profile without one fails its build (K4W_IMAGE_SERVERCORE/NANOSERVER) instead
                images.setdefault(image, []).append(node.name)
        if len(images) > 1:
            listed = "; ".join(f"{image} on {', '.join(nodes)}" for image, nodes in images.items())
            raise K4wError(f"cluster {self.config.cluster.name}: the Windows nodes use boxes with different {what} "
                           f"images ({listed}); the demo workload needs one: give every Windows node the same box")
        return next(iter(images), None)

    @property
    def emulated_cpu(self) -> bool:
        """The VMs run on QEMU's emulated CPU (host.provider libvirt, libvirt.accelerator tcg)."""
        return control_plane_mod.emulated_cpu(self.config)

    @property
    def poll_seconds(self) -> float:
        """How often cluster-up's waits check the cluster (k4w.derive.control_plane POLL_SECONDS)."""
        return control_plane_mod.EMULATED_POLL_SECONDS if self.emulated_cpu else control_plane_mod.POLL_SECONDS

    @property
    def control_plane(self) -> control_plane_mod.Scaling | None:
        """How the master's kubeadm config scales the control plane to an emulated CPU; None on a real one
        (k4w.derive.control_plane). Refuses a master box whose kubeadm API cannot carry it."""
        return control_plane_mod.scaling(self.config, self.kube.kubeadm_api)

    @property
    def join_timeouts(self) -> dict[str, str]:
        """JoinConfiguration.timeouts of every worker whose kubeadm speaks v1beta4 (k4w.model.kubeadm_timeouts)."""
        return kubeadm_timeouts.join(self.config.cluster.ready_timeout, self.emulated_cpu)

    def profile(self, box: str) -> Profile:
        try:
            return self.profiles[box]
        except KeyError:
            raise K4wError(f"box {box} is not used by any node of cluster {self.config.cluster.name} "
                           f"(boxes in use: {', '.join(self.profiles)})") from None
