"""Kubernetes' version-skew rule between a kubelet and the API server it joins.

"kubelet must not be newer than kube-apiserver" and "may be up to three minor versions older than
kube-apiserver (kubelet < 1.25 may only be up to two minor versions older)"
(kubernetes/website@0637786b3e0a896fabe197d29682f2bb688074a6:content/en/releases/version-skew-policy.md,
where the page content/en/docs/setup/release/version-skew-policy.md moved to).

Applied twice: to the boxes of one cluster.yml (config load: the master's Kubernetes against each
worker's), and to an existing cluster's API server against the boxes that join it (k4w.cluster.facts).
"""

from __future__ import annotations

import re

from k4w.infra.errors import K4wError

SKEW_MINORS = 3
SKEW_MINORS_BEFORE_1_25 = 2
_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?")


def minor(version: str) -> tuple[int, int]:
    m = _VERSION.match(version or "")
    if not m:
        raise K4wError(f"cannot read a Kubernetes version from {version!r}")
    return int(m[1]), int(m[2])


def skew_problem(apiserver: str, kubelet: str, who: str) -> str | None:
    """Why a kubelet of version `kubelet` may not join an API server of `apiserver`, or None."""
    (a_major, a_minor), (k_major, k_minor) = minor(apiserver), minor(kubelet)
    if a_major != k_major or k_minor > a_minor:
        return (f"Kubernetes version: {who} runs kubelet {kubelet}, newer than the cluster's API server {apiserver}; "
                "a kubelet must not be newer than kube-apiserver (version-skew policy)")
    window = SKEW_MINORS if k_minor >= 25 else SKEW_MINORS_BEFORE_1_25
    if a_minor - k_minor > window:
        return (f"Kubernetes version: {who} runs kubelet {kubelet}, {a_minor - k_minor} minor versions older than the cluster's "
                f"API server {apiserver}; the version-skew policy allows at most {window}")
    return None
