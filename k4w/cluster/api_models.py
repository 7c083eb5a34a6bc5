"""The shapes of the API objects k4w reads from a cluster it did not create (k4w.cluster.facts,
k4w.cluster.existing), held at the boundary by k4w.infra.documents.parse.

Only the fields k4w reads are declared; the rest of each object is ignored. Names and types follow
the Kubernetes API (kubernetes/kubernetes@v1.37.2: staging/src/k8s.io/api/core/v1/types.go, apps/v1,
version.Info in staging/src/k8s.io/apimachinery/pkg/version/types.go; kubeadm's ClusterConfiguration
networking in cmd/kubeadm/app/apis/kubeadm/v1beta4/types.go; KubeletConfiguration.clusterDNS in
staging/src/k8s.io/kubelet/config/v1beta1/types.go) and Flannel's net-conf.json (flannel-io/flannel@v0.28.10
pkg/subnet/config.go: Network, Backend with Type; pkg/backend/vxlan/vxlan.go: VNI, Port, integers).
"""

from __future__ import annotations

import ipaddress
import urllib.parse
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, StrictInt, StrictStr, model_validator


def _cidr(value: str) -> str:
    ipaddress.ip_network(value.strip(), strict=False)  # ValueError: pydantic names the field
    return value


def _cidrs(value: str) -> str:
    """kubeadm's podSubnet/serviceSubnet: one CIDR, or a comma-separated pair (dual stack)."""
    for part in value.split(","):
        _cidr(part)
    return value


def _ip(value: str) -> str:
    ipaddress.ip_address(value)
    return value


def _cluster_ip(value: str) -> str:
    return value if value == "None" else _ip(value)   # "None": a headless Service (core/v1 ClusterIPNone)


def _https_url(value: str) -> str:
    parts = urllib.parse.urlsplit(value)
    if parts.scheme != "https" or not parts.hostname:
        raise ValueError("not an https:// URL with a host")
    parts.port  # noqa: B018 - raises ValueError for a port that is not a number in 0-65535
    return value


Cidr = Annotated[StrictStr, AfterValidator(_cidr)]
CidrList = Annotated[StrictStr, AfterValidator(_cidrs)]
Ip = Annotated[StrictStr, AfterValidator(_ip)]
ClusterIp = Annotated[StrictStr, AfterValidator(_cluster_ip)]
HttpsUrl = Annotated[StrictStr, AfterValidator(_https_url)]


class Shape(BaseModel):
    """Unknown fields are the cluster's business; known ones must have their type."""

    model_config = ConfigDict(extra="allow")


def _version(value: str) -> str:
    if not (value[:1] == "v" and "." in value):
        raise ValueError("not a version like v1.37.2")
    return value


class VersionInfo(Shape):
    gitVersion: Annotated[StrictStr, AfterValidator(_version)]


class ObjectMeta(Shape):
    name: StrictStr
    namespace: StrictStr | None = None
    labels: dict[str, StrictStr] | None = None
    deletionTimestamp: StrictStr | None = None


class AnyObject(Shape):
    metadata: ObjectMeta


class ConfigMap(Shape):
    data: dict[str, StrictStr] | None = None


class Networking(Shape):
    podSubnet: CidrList | None = None
    serviceSubnet: CidrList | None = None
    dnsDomain: StrictStr | None = None


class ClusterConfiguration(Shape):
    networking: Networking | None = None


class KubeletConfiguration(Shape):
    clusterDNS: list[Ip] | None = None


class NodeSpec(Shape):
    podCIDR: Cidr | None = None
    podCIDRs: list[Cidr] | None = None


class NodeCondition(Shape):
    type: StrictStr
    status: StrictStr | None = None


class NodeStatus(Shape):
    conditions: list[NodeCondition] | None = None


class Node(Shape):
    metadata: ObjectMeta
    spec: NodeSpec | None = None
    status: NodeStatus | None = None


class NodeList(Shape):
    items: list[Node] | None = None


class ServiceSpec(Shape):
    clusterIP: ClusterIp | None = None


class Service(Shape):
    spec: ServiceSpec | None = None


class SelectorRequirement(Shape):
    key: StrictStr
    operator: StrictStr
    values: list[StrictStr] | None = None


class SelectorTerm(Shape):
    matchExpressions: list[SelectorRequirement] | None = None


class NodeSelector(Shape):
    nodeSelectorTerms: list[SelectorTerm]


class NodeAffinity(Shape):
    requiredDuringSchedulingIgnoredDuringExecution: NodeSelector | None = None


class Affinity(Shape):
    nodeAffinity: NodeAffinity | None = None


class PodSpec(Shape):
    nodeSelector: dict[str, StrictStr] | None = None
    affinity: Affinity | None = None


class PodTemplate(Shape):
    spec: PodSpec | None = None


class DaemonSetSpec(Shape):
    template: PodTemplate | None = None


class DaemonSet(Shape):
    metadata: ObjectMeta
    spec: DaemonSetSpec | None = None


class DaemonSetList(Shape):
    items: list[DaemonSet] | None = None


class KubeconfigCluster(Shape):
    server: HttpsUrl


class KubeconfigClusterEntry(Shape):
    cluster: KubeconfigCluster


class ClusterInfoKubeconfig(Shape):
    """kube-public/cluster-info's kubeconfig (kubeadm's bootstrap-token phase writes it)."""

    clusters: list[KubeconfigClusterEntry]


class FlannelBackend(Shape):
    Type: StrictStr | None = None
    VNI: StrictInt | None = None
    Port: StrictInt | None = None

    @model_validator(mode="before")
    @classmethod
    def _any_case(cls, data: Any) -> Any:
        return _canonical_keys(data, ("Type", "VNI", "Port"))


class NetConf(Shape):
    """net-conf.json; Go's encoding/json matches its keys without regard to case, and so does this."""

    Network: Cidr | None = None
    Backend: FlannelBackend | None = None

    @model_validator(mode="before")
    @classmethod
    def _any_case(cls, data: Any) -> Any:
        return _canonical_keys(data, ("Network", "Backend"))


def _canonical_keys(data: Any, names: tuple[str, ...]) -> Any:
    if not isinstance(data, dict):
        return data   # pydantic then says it wanted an object
    canonical = {n.lower(): n for n in names}
    return {canonical.get(str(k).lower(), k): v for k, v in data.items()}
