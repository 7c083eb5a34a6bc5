"""The control plane kubeadm writes, scaled to an emulated CPU (host.provider libvirt, libvirt.accelerator tcg).

Under TCG, QEMU emulates every instruction (about ten times slower than KVM), and kubeadm's defaults for
a control plane on real hardware break it. Measured by the CI harness's single-node cluster run
(docs/development.md "invoke e2e --cluster", TCG on 2 shared cores):
- kube-controller-manager and kube-scheduler keep the defaults of a 15 s lease and a 10 s renewal
  deadline (k8s.io/component-base@v0.37.2 config/options/leaderelectionconfig.go), each renewal given
  half of it; under a guest load of 13-20 both lost their leases and exited ("Leaderelection lost"), so
  no EndpointSlice was made and a Service refused connections (the fourth run).
- kube-apiserver and etcd get a livenessProbe with failureThreshold 8, 10 s apart, so 80 s
  (k8s.io/kubernetes@v1.37.2 cmd/kubeadm/app/util/staticpod/utils.go LivenessProbe); kube-apiserver's
  /livez includes an etcd check with a 2 s timeout (k8s.io/apiserver@v0.37.2 pkg/server/options/etcd.go),
  etcd answered slower than that for minutes, and the kubelet restarted kube-apiserver again and again
  (runs 2 and 4: `connection refused`, `TLS handshake timeout`).

kubeadm takes both in its own config, so `kubeadm init` writes the static Pods right the first time:
the leases as ClusterConfiguration controllerManager/scheduler extraArgs, the probe threshold as
patches of kubeadm's static Pods (InitConfiguration.patches.directory), which cluster-up uploads to
the master beside the config. Only kubeadm.k8s.io/v1beta4 (Kubernetes 1.31+) is written: the seed era
(kubeadm 1.11, v1alpha2) has no patches and is a Hyper-V recipe (Docker on Windows Server 1803).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from k4w.infra.errors import K4wError

# The CPU every emulated (TCG) guest gets: Packer's bakes, the cluster's libvirt domains and the CI harness's
# QEMU guests alike. QEMU's qemu64 model plus what Go's crypto needs to be fast (AES-NI, PCLMULQDQ,
# SSE4.1: without them kube-apiserver's TLS handshakes missed their 10 s limit under TCG) and the SSE levels
# below it, which also make it x86-64-v2 with qemu64's own CX16 and LAHF_LM (QEMU 7.2 target/i386/cpu.c
# "qemu64"; Windows Server 2025 requires v2). NOT QEMU's "max": it adds BMI1 and BMI2, found on Ubuntu
# 26.04's kernel (7.0.0-14-generic) under QEMU 7.2's TCG:
# - BMI1 with BMI2: the kernel stops before its console starts (no serial output; either alone boots);
# - BMI2: the kernel's BPF JIT then emits SHLX (c4 e2 f9 f7), which TCG answers with #UD, so writing an
#   interface sysctl ran systemd-networkd's sysctl_monitor BPF program into "Oops: invalid opcode" and a
#   kernel panic (kube-proxy's sysctl writes, the third ubuntu-2604-e2e --cluster run).
TCG_CPU_MODEL = "qemu64"
TCG_CPU_FEATURES = ("ssse3", "sse4.1", "sse4.2", "popcnt", "aes", "pclmulqdq")
# libvirt's name of a feature where it differs from QEMU's (libvirt's src/cpu_map/x86_features.xml: it
# refuses "pclmulqdq" as an unknown CPU feature, measured with libvirt 9.0).
LIBVIRT_FEATURE_NAMES = {"pclmulqdq": "pclmuldq"}


def qemu_cpu() -> str:
    """The emulated CPU as QEMU's -cpu (and Packer's cpu_model) takes it."""
    return ",".join((TCG_CPU_MODEL, *(f"+{f}" for f in TCG_CPU_FEATURES)))


def libvirt_cpu_features() -> list[str]:
    """The same features by libvirt's names, for the domain's <cpu mode='custom'> (vagrant-libvirt cpu_feature)."""
    return [LIBVIRT_FEATURE_NAMES.get(f, f) for f in TCG_CPU_FEATURES]
from k4w.model.config import Config

# The only kubeadm API this is written for (extraArgs a list of {name, value}, InitConfiguration.patches):
# k8s.io/kubernetes@v1.37.2 cmd/kubeadm/app/apis/kubeadm/v1beta4/types.go ControlPlaneComponent.ExtraArgs
# ([]Arg, "duplicate extra arguments are allowed"), Arg{name, value}, InitConfiguration.Patches, Patches.Directory.
API = "kubeadm.k8s.io/v1beta4"

# Leases 12 times the default, so a renewal survives a minute-long stall of the emulated guest (the
# harness's passing runs since the fifth used these values). The flags of kube-controller-manager and kube-scheduler
# (k8s.io/component-base@v0.37.2 config/options/leaderelectionconfig.go BindLeaderElectionFlags).
LEADER_ELECTION_ARGS = (("leader-elect-lease-duration", "180s"), ("leader-elect-renew-deadline", "120s"),
                        ("leader-elect-retry-period", "20s"))
# The components kubeadm starts with --leader-elect=true (cmd/kubeadm/app/phases/controlplane/manifests.go
# getControllerManagerCommand, getSchedulerCommand at v1.37.2).
LEADER_ELECTING = ("kube-controller-manager", "kube-scheduler")
# Each one's field in ClusterConfiguration (v1beta4 types.go ClusterConfiguration at v1.37.2).
CONFIG_KEYS = {"kube-controller-manager": "controllerManager", "kube-scheduler": "scheduler"}
# kubeadm's livenessProbe failureThreshold (utils.go LivenessProbe at v1.37.2, 10 s apart), and the one an
# emulated CPU gets: 30 probes is 5 minutes, longer than the etcd stalls the harness saw.
KUBEADM_LIVENESS_FAILURE_THRESHOLD = 8
LIVENESS_FAILURE_THRESHOLD = 30
# The static Pods whose probes are scaled; each is also the name of kubeadm's patch target and of the
# Pod's one container (cmd/kubeadm/app/constants KubeAPIServer, Etcd; util/staticpod/utils.go ComponentPod).
LIVENESS_TOLERANT = ("kube-apiserver", "etcd")
# kubeadm's readinessProbe of both runs every second (utils.go ReadinessProbe at v1.37.2: periodSeconds 1,
# timeoutSeconds 15, failureThreshold 3). Each of kube-apiserver's is a new TLS handshake and a /readyz that
# asks etcd; under TCG that is CPU the starved master lacked in the seventh libvirt run (guest load 20,
# kube-apiserver killed by its liveness probe). Nothing waits on these Pods' readiness (the kubernetes
# Service's endpoints are kube-apiserver's own, kubeadm's waits call the components' health endpoints), so
# every 10 s costs only 30 s instead of 3 s to see a component unready.
READINESS_PERIOD_SECONDS = 10
# The keys and certificates kubeadm makes (ClusterConfiguration.encryptionAlgorithm, v1beta4 types.go at
# v1.37.2: RSA-2048 by default). Every TLS handshake makes the server sign with its key, and an ECDSA P-256
# signature costs a small fraction of an RSA-2048 one, which on an emulated CPU is tens of milliseconds per
# handshake (kubelet probes open a connection each time).
ENCRYPTION_ALGORITHM = "ECDSA-P256"
# The patch files' folder under OUT and on the master. cluster-up uploads OUT/kubeadm/patches/ there, beside
# the config in /tmp/k4w (k4w.cluster.steps.LINUX_DIR, where every upload to a Linux guest goes; kubeadm
# reads the folder only during `kubeadm init`, right after the upload).
PATCHES_OUT_DIR = "kubeadm/patches"
PATCHES_GUEST_DIR = "/tmp/k4w/kubeadm-patches"
# kubeadm's patch file names, target[suffix][+patchtype].extension (k8s.io/kubernetes@v1.37.2
# cmd/kubeadm/app/util/patches/patches.go parseFilename, knownTargets, patchTypes, knownExtensions). A file
# whose target or extension kubeadm does not know is IGNORED with a log line, not refused: a misnamed file
# would drop its setting silently, so k4w.validate.kubeadm_config_rules holds every rendered name to this.
PATCH_TARGETS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubeletconfiguration",
                 "corednsdeployment", "kubeproxydaemonset")
PATCH_TYPES = ("json", "merge", "strategic")
PATCH_NAME = re.compile(rf"^(?P<target>{'|'.join(map(re.escape, PATCH_TARGETS))})(?P<suffix>[^.+\n]*)"
                        rf"(?:\+(?P<type>{'|'.join(PATCH_TYPES)}))?\.(?P<extension>json|yaml)$")


# Seconds between two checks of one of cluster-up's waits (a node Ready, a rollout done). On an emulated CPU a
# check is dear: one `kubectl get nodes -o json` on the master took 1.7 s of the guest's CPU (the sixth libvirt
# run), so every 5 s it would take a third of a control plane that is already short of CPU; the waits there last
# minutes, and 30 s more to notice the end is cheap beside them.
POLL_SECONDS = 5.0
EMULATED_POLL_SECONDS = 30.0


def emulated_cpu(cfg: Config) -> bool:
    """Whether the cluster's VMs run on an emulated CPU (QEMU's TCG), where the control plane is scaled."""
    return cfg.host.provider == "libvirt" and cfg.libvirt.accelerator == "tcg"


@dataclass(frozen=True)
class Scaling:
    """What the kubeadm config of an emulated-CPU master carries (the template context `control_plane`)."""

    leader_election: tuple[tuple[str, str], ...]
    leader_electing: tuple[str, ...]
    liveness_failure_threshold: int
    liveness_tolerant: tuple[str, ...]   # also get readiness_period_seconds
    readiness_period_seconds: int
    encryption_algorithm: str
    patches_dir: str  # on the master: InitConfiguration.patches.directory

    @property
    def config_keys(self) -> tuple[str, ...]:
        """ClusterConfiguration's field of each leader-electing component, where its extraArgs go."""
        return tuple(CONFIG_KEYS[component] for component in self.leader_electing)

    @property
    def leader_election_flags(self) -> tuple[str, ...]:
        """The flags as kubeadm writes extraArgs into the static Pod's command (--name=value)."""
        return tuple(f"--{name}={value}" for name, value in self.leader_election)


SCALING = Scaling(LEADER_ELECTION_ARGS, LEADER_ELECTING, LIVENESS_FAILURE_THRESHOLD, LIVENESS_TOLERANT,
                  READINESS_PERIOD_SECONDS, ENCRYPTION_ALGORITHM, PATCHES_GUEST_DIR)


def scaling(cfg: Config, kubeadm_api: str) -> Scaling | None:
    """The scaling for this cluster's master, or None where its CPU is not emulated (or k4w makes no master:
    cluster.existing). Refuses a master whose kubeadm API is not v1beta4 rather than leave it unscaled."""
    if not emulated_cpu(cfg) or cfg.joins_existing:
        return None
    if kubeadm_api != API:
        raise K4wError(f"libvirt.accelerator tcg: the master's box speaks kubeadm API {kubeadm_api}, but the control plane "
                       f"of an emulated CPU is scaled (leader-election leases, liveness of kube-apiserver and etcd) only "
                       f"through {API} (Kubernetes 1.31+): use a containerd-era master box, or libvirt.accelerator kvm")
    return SCALING
