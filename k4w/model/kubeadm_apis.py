"""Which kubeadm config API each Kubernetes release's kubeadm reads, so a box profile cannot pin one its
own kubeadm refuses (kubeadm 1.37 reads kubeadm.k8s.io/v1beta4 only: v1beta3 is removed).

Read from kubeadm's own support matrix, k8s.io/kubernetes@v1.37.2 (module zip
h1:A2VDEiObzkYqFTKhSsn0ZEb0RlLEXpHWj93gi2HqEwE=) cmd/kubeadm/app/util/config/common.go,
validateSupportedVersion:
- oldKnownAPIVersions maps each API kubeadm refuses to "Please use kubeadm <version> instead": the newest
  kubeadm that still reads it (v1beta3 -> v1.36);
- the comment above it says where each API started (v1.11 writes v1alpha2, v1.12 v1alpha3, v1.13 v1beta1,
  v1.15 v1beta2, v1.22 v1beta3, v1.31 v1beta4);
- experimentalAPIVersions holds kubeadm.k8s.io/v1, refused unless a command is given
  --allow-experimental-api: not an API a profile may pin.
"""

from __future__ import annotations

from k4w.infra.errors import K4wError
from k4w.model.version_skew import minor as version_minor

GROUP = "kubeadm.k8s.io/"
COMMON_GO = "k8s.io/kubernetes@v1.37.2 cmd/kubeadm/app/util/config/common.go (validateSupportedVersion)"

# API -> (first minor whose kubeadm reads it, last minor whose kubeadm reads it; None: still read by 1.37).
READ_BY = {
    "v1alpha1": ((1, 0), (1, 11)),  # "v1.10 and earlier: v1alpha1"; oldKnownAPIVersions: "v1.11"
    "v1alpha2": ((1, 11), (1, 12)),
    "v1alpha3": ((1, 12), (1, 14)),
    "v1beta1": ((1, 13), (1, 15)),
    "v1beta2": ((1, 15), (1, 22)),
    "v1beta3": ((1, 22), (1, 36)),
    "v1beta4": ((1, 31), None),
}
EXPERIMENTAL = {"v1"}


def problem(api: str, kubernetes_version: str) -> str | None:
    """Why kubeadm of that Kubernetes version cannot read a config of that API; None when it can."""
    name = str(api).removeprefix(GROUP)
    k8s = version_minor(str(kubernetes_version))
    shown = ".".join(map(str, k8s))
    if not str(api).startswith(GROUP) or (name not in READ_BY and name not in EXPERIMENTAL):
        return f"{api!r} is not a kubeadm config API ({', '.join(GROUP + n for n in READ_BY)})"
    if name in EXPERIMENTAL:
        return f"{api} is experimental in kubeadm {shown}: it refuses it without --allow-experimental-api ({COMMON_GO})"
    first, last = READ_BY[name]
    if k8s < first:
        return f"kubeadm {shown} predates {api} (first read by kubeadm {first[0]}.{first[1]}; {COMMON_GO})"
    if last is not None and k8s > last:
        newest = max((start, n) for n, (start, end) in READ_BY.items() if start <= k8s and (end is None or k8s <= end))[1]
        return (f"kubeadm {shown} no longer reads {api} (kubeadm {last[0]}.{last[1]} is the last that does; "
                f"{COMMON_GO}): use {GROUP}{newest}")
    return None


def check_profile(path, kubernetes: dict) -> None:
    """Refuse a profile whose kubernetes.kubeadm_api its own kubernetes.version's kubeadm cannot read."""
    api, version = kubernetes.get("kubeadm_api"), kubernetes.get("version")
    if api is None or version is None:
        return  # profiles.REQUIRED and the templates name a missing key where it is used
    why = problem(api, version)
    if why:
        raise K4wError(f"{path}: kubernetes.kubeadm_api {api} with kubernetes.version {version}: {why}")
