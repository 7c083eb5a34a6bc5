"""The cluster.yml model. Validated once; every artifact is rendered from it.

Errors name the field and, because we keep the YAML node marks, the line in the file.
"""

from __future__ import annotations

import functools
import ipaddress
import re
import zoneinfo
from pathlib import Path
from typing import Literal

import yaml
from cryptography import x509
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError, ValidationInfo, field_validator, model_validator

from k4w.outdir import private
from k4w.model import profiles
from k4w.infra.errors import ConfigError, K4wError
from k4w.model import config_rules

# http(s)://[userinfo@]host:port[/], matched whole (re.fullmatch: a trailing newline never slips
# through). Tools in the guests (apt, WinHTTP, Docker) accept nothing else, and a missing port
# silently means 80 in some and 8080 in others. userinfo is exactly RFC 3986 section 3.2.1:
# unreserved / pct-encoded / sub-delims / ":". Anything else ('#', '?', '@', '[', a space,
# non-ASCII...) makes Go's net/url (Docker, kubelet, kube-proxy, flanneld) pick a garbage host or
# ignore the proxy, and curl refuse the URL; so it must be percent-encoded, and a '%' must start a
# valid %XX escape, or Go drops HTTP_PROXY without a word.
# One deviation from RFC 3986: a literal ' is refused too (write %27). pam_env, which reads
# /etc/environment on the Ubuntu nodes, treats quotes as quoting and would mangle the URL.
_USERCHAR = r"(?:[A-Za-z0-9\-._~!$&()*+,;=]|%[0-9A-Fa-f]{2})"  # a ':' separates user from password
PROXY_URL = re.compile(
    rf"(?P<scheme>https?)://(?:(?P<userinfo>(?P<user>{_USERCHAR}*)(?::(?P<password>(?:{_USERCHAR}|:)*))?)@)?"
    r"(?P<host>[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\]):(?P<port>\d{1,5})/?"
)
PERCENT_ENCODE_HINT = (
    "percent-encode any other character in the user or password: '@' as %40, '#' as %23, '?' as %3F, "
    "'/' as %2F, '%' as %25, a space as %20, a quote as %27, '[' ']' as %5B %5D (e.g. python3 -c "
    "\"import urllib.parse; print(urllib.parse.quote('p@ss#1', safe=''))\")"
)
# A download mirror's base URL (downloads.mirror): the proxy URL's scheme, userinfo and host
# rules, but the port is optional and a path follows (Artifactory and Nexus serve repositories
# under one, e.g. /artifactory or /repository). Path segments are RFC 3986 pchars; no query or
# fragment, because component paths are appended to it.
_PCHAR = r"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@]|%[0-9A-Fa-f]{2})"
MIRROR_URL = re.compile(
    rf"(?P<scheme>https?)://(?:(?P<userinfo>(?P<user>{_USERCHAR}*)(?::(?P<password>(?:{_USERCHAR}|:)*))?)@)?"
    r"(?P<host>[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])(?::(?P<port>\d{1,5}))?"
    rf"(?P<path>(?:/{_PCHAR}*)*)"
)
# An IANA tz name such as UTC or Europe/Warsaw; the Ubuntu installer and timedatectl take nothing else.
TIMEZONE = re.compile(r"[A-Za-z0-9_+-]+(/[A-Za-z0-9_+-]+)*")
NO_PROXY_ENTRY = re.compile(r"[A-Za-z0-9.*_:/\[\]-]+")
# RFC 1123 host name labels, lower case: the cluster domain ends up in kubelet flags, CoreDNS,
# NO_PROXY and guest shell scripts, where a quote or space would break or inject arguments.
DNS_NAME = re.compile(r"(?=.{1,253}\Z)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*")
NAME = re.compile(r"[a-z0-9]([a-z0-9-]{0,13}[a-z0-9])?")  # NetBIOS limit: 15 chars


def optional_path(v: str | None, message: str) -> str | None:
    """An optional path setting: empty means unset; one line of text, no control characters."""
    if v in (None, ""):
        return None
    if any(ord(ch) < 32 for ch in v) or not v.strip():
        raise ValueError(message)
    return v


class Strict(BaseModel):
    # use_attribute_docstrings: the docstring under each field is its description in the JSON
    # Schema and the cluster.yml reference (k4w/commands/schema.py, `invoke schema`).
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class Cluster(Strict):
    """Naming and timing of the whole cluster, and whether its nodes join a cluster k4w did not create."""

    name: str = "k4w"
    """The cluster's name: the prefix of its Hyper-V VM names (<name>-<node>) and of its NetNat. 1-15 lower-case letters,
    digits or '-', not starting or ending with '-'."""
    domain: str = "cluster.local"
    """The Kubernetes cluster DNS domain (kubelet, CoreDNS, NO_PROXY): a lower-case RFC 1123 DNS name."""
    timezone: str = "UTC"
    """The IANA time zone the Ubuntu installer sets (preseed, autoinstall), e.g. Europe/Warsaw. A Windows box takes its
    time zone from its box profile."""
    ready_timeout: StrictInt = Field(900, ge=60, le=7200)
    """Seconds cluster-up (and kubeadm, for the control plane) waits for something to become ready, e.g. every node
    Ready."""
    # The admin kubeconfig of a cluster k4w did not create (kubeadm, kubespray): k4w then makes no
    # master and only joins the nodes to it (k4w/cluster/existing.py; docs/existing-cluster.md).
    # Relative to the current folder, ~ expanded; read only by cluster-up/plan.
    existing: str | None = None
    """The admin kubeconfig of a cluster k4w did not create (kubeadm, kubespray). k4w then makes no master and joins the
    nodes, all workers, to that cluster. Relative to the current folder, ~ expanded. null: k4w creates the cluster."""

    @field_validator("existing")
    @classmethod
    def _existing(cls, v: str | None) -> str | None:
        return optional_path(v, "must be the path of a kubeconfig file on one line, e.g. ~/.kube/admin.conf")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME.fullmatch(v):
            raise ValueError("must be 1-15 lowercase letters, digits or '-', not starting or ending with '-'")
        return v

    @field_validator("domain")
    @classmethod
    def _domain(cls, v: str) -> str:
        if not DNS_NAME.fullmatch(v):
            raise ValueError("must be a lower-case DNS name (RFC 1123) such as cluster.local: letters, digits, '-' and dots")
        return v

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, v: str) -> str:
        # It feeds the Ubuntu installer only (preseed time/zone, autoinstall timezone:), which
        # takes an IANA tz name; a Windows box's time zone is its profile's guest.timezone, a
        # Windows time zone id (tzutil /l). A name the tz database lacks would only show up inside
        # the installer, minutes into a build, so it is refused here.
        if not TIMEZONE.fullmatch(v) or v not in _tz_names():
            raise ValueError(f"'{v}' is not in the tz database; use a name such as UTC or Europe/Warsaw "
                             "(timedatectl list-timezones lists them)")
        return v


@functools.cache
def _tz_names() -> frozenset[str]:
    """The IANA tz database names: the system's, else the tzdata package's (Windows has none)."""
    return frozenset(zoneinfo.available_timezones())


class Proxy(Strict):
    """The corporate HTTP proxy every download goes through: installers, apt, Docker/containerd, Windows, invoke fetch."""

    http: str | None = None
    """Proxy for http:// URLs: http(s)://[user:password@]host:port, the port required; credentials percent-encoded, never
    logged. null: no proxy."""
    https: str | None = None
    """Proxy for https:// URLs, same form as http. It is never copied from http: set both if HTTPS goes through a proxy."""
    no_proxy: list[str] = Field(default_factory=list)
    """Extra hosts, .domains, IPs or CIDRs reached without the proxy. The cluster's CIDRs, node IPs and names and its
    domain are added by k4w."""

    @field_validator("no_proxy")
    @classmethod
    def _no_proxy(cls, v: list[str]) -> list[str]:
        # Hosts, domains, IPs and CIDRs only: a quote or space would break the Windows
        # first-logon command line and the systemd drop-ins that carry this list.
        bad = [entry for entry in v if not NO_PROXY_ENTRY.fullmatch(entry)]
        if bad:
            raise ValueError(f"entries must be host names, .domains, IPs or CIDRs; not {', '.join(map(repr, bad))}")
        return v

    @field_validator("http", "https")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v in (None, ""):
            return None
        m = PROXY_URL.fullmatch(v)
        if not m:
            if re.fullmatch(r"https?://[^@]*@.*", v, flags=re.S):
                raise ValueError(f"the user:password part has a character a proxy URL cannot carry as is; {PERCENT_ENCODE_HINT}")
            raise ValueError("must look like http://host:port or https://host:port, optionally with user:password@ before the host")
        if not 0 < int(m["port"]) < 65536:
            raise ValueError(f"port {m['port']} is not between 1 and 65535")
        return v.rstrip("/")


_RFC1918 = tuple(ipaddress.IPv4Network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))
_THIS_NETWORK = ipaddress.IPv4Network("0.0.0.0/8")  # RFC 1122 section 3.2.1.3


class Network(Strict):
    """The cluster's address ranges and Flannel backend, decided once here; every artifact takes them from here. The
    three ranges must not overlap."""

    node_cidr: ipaddress.IPv4Network = ipaddress.IPv4Network("192.168.250.0/24")
    """The cluster switch's subnet: every node's ip is in it, and the host's gateway is its first address (or
    hyperv.cluster_gateway). Private (RFC 1918), /29 or larger."""
    pod_cidr: ipaddress.IPv4Network = ipaddress.IPv4Network("10.244.0.0/16")
    """The pod network: Flannel gives each node a /24 of it. /23 or larger, with a /24 for every node."""
    service_cidr: ipaddress.IPv4Network = ipaddress.IPv4Network("10.96.0.0/12")
    """The Kubernetes service range: the API service is its 1st address, the cluster DNS its 10th. /28 or larger."""
    backend: Literal["host-gw", "vxlan"] = "host-gw"
    """Flannel's backend. vxlan needs boxes that support it (Windows Server 2019 or later); the containerd-era Windows
    boxes run vxlan only."""

    @field_validator("node_cidr", "pod_cidr", "service_cidr", mode="before")
    @classmethod
    def _cidr(cls, v):
        try:
            return ipaddress.IPv4Network(str(v), strict=True)
        except ValueError as exc:
            raise ValueError(f"not an IPv4 network in CIDR form with host bits zero ({exc})") from None

    @field_validator("node_cidr", "pod_cidr", "service_cidr")
    @classmethod
    def _unicast(cls, v: ipaddress.IPv4Network) -> ipaddress.IPv4Network:
        # Addresses no interface, route or NAT may use for a cluster: the kernel drops or
        # answers them itself (loopback, multicast, 0/8, link-local, 240/4 and broadcast).
        for kind, bad in (("loopback", v.is_loopback), ("multicast", v.is_multicast), ("link-local", v.is_link_local),
                          ("reserved (240.0.0.0/4)", v.is_reserved), ("'this network' (0.0.0.0/8)", v.subnet_of(_THIS_NETWORK))):
            if bad:
                raise ValueError(f"{v} is {kind} address space; use a private range such as 10.0.0.0/8, 172.16.0.0/12 or 192.168.0.0/16")
        return v

    @field_validator("node_cidr")
    @classmethod
    def _node_size(cls, v: ipaddress.IPv4Network) -> ipaddress.IPv4Network:
        if v.prefixlen > 29:
            raise ValueError("needs room for a gateway and the nodes: use /29 or larger")
        # network-up puts a NetNat on it: a public range would hide those addresses of the
        # Internet from the host, so it must be private (RFC 1918).
        if not any(v.subnet_of(private) for private in _RFC1918):
            raise ValueError(f"{v} is not a private range (RFC 1918: 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16); "
                             "network-up NATs it, which would hide those public addresses from this host")
        return v

    @field_validator("pod_cidr")
    @classmethod
    def _pod_size(cls, v: ipaddress.IPv4Network) -> ipaddress.IPv4Network:
        # Flannel hands each node a /24 out of this range (SubnetLen default 24).
        if v.prefixlen > 23:
            raise ValueError("Flannel gives each node a /24 from it: use /23 or larger")
        return v

    @field_validator("service_cidr")
    @classmethod
    def _service_size(cls, v: ipaddress.IPv4Network) -> ipaddress.IPv4Network:
        # kubeadm gives the cluster DNS the 10th address of this range; it must exist and not be
        # the broadcast address.
        if v.num_addresses < 16:
            raise ValueError(f"{v} has {v.num_addresses} addresses; the cluster DNS takes the 10th: use /28 or larger")
        return v

    @model_validator(mode="after")
    def _no_overlap(self) -> "Network":
        named = [("node_cidr", self.node_cidr), ("pod_cidr", self.pod_cidr), ("service_cidr", self.service_cidr)]
        for i, (a_name, a) in enumerate(named):
            for b_name, b in named[i + 1:]:
                if a.overlaps(b):
                    raise ValueError(f"{a_name} {a} overlaps {b_name} {b}")
        return self


class HyperV(Strict):
    """The Hyper-V virtual switches: every VM gets one NIC on each."""

    management_switch: str = "Default Switch"
    """The switch of each VM's management NIC (DHCP): Vagrant, SSH and WinRM use it, and it carries outbound traffic."""
    cluster_switch: str = "k4w-cluster"
    """The switch of each VM's cluster NIC, which has the node's static ip; `invoke network-up` creates it."""
    # Internal: the host holds the gateway address and a NetNat (one host). External: the switch is bound
    # to the host adapter cluster_adapter and the user's network routes network.node_cidr, its router
    # being cluster_gateway (default: the first address); no NetNat, so nodes on several Hyper-V hosts,
    # each running cluster-up with its own nodes, reach each other and a cluster elsewhere.
    cluster_switch_type: Literal["Internal", "External"] = "Internal"
    """Internal: the host holds the gateway address and a NetNat (one host). External: the switch is bound to
    cluster_adapter and your network routes network.node_cidr, so nodes on several Hyper-V hosts reach each other."""
    cluster_adapter: str | None = None
    """The host network adapter an External cluster switch is bound to (Get-NetAdapter -Physical lists them). Required
    with External, not allowed with Internal."""
    cluster_gateway: ipaddress.IPv4Address | None = None
    """The router of network.node_cidr for an External switch, inside node_cidr; null: its first address. Not allowed
    with Internal."""

    @field_validator("cluster_adapter")
    @classmethod
    def _adapter(cls, v: str | None) -> str | None:
        if v is not None and (not v.strip() or any(ord(ch) < 32 for ch in v)):
            raise ValueError("must name a network adapter of this host (Get-NetAdapter lists them), on one line")
        return v

    @model_validator(mode="after")
    def _external(self) -> "HyperV":
        if self.cluster_switch_type == "External" and not self.cluster_adapter:
            raise ValueError("cluster_switch_type External needs cluster_adapter: the host adapter the switch is bound to "
                             "(Get-NetAdapter -Physical lists them)")
        if self.cluster_switch_type == "Internal" and (self.cluster_adapter or self.cluster_gateway):
            raise ValueError("cluster_adapter and cluster_gateway are for cluster_switch_type External; an Internal switch's "
                             "gateway is this host (the first address of network.node_cidr)")
        return self

    @field_validator("management_switch", "cluster_switch")
    @classmethod
    def _switch(cls, v: str) -> str:
        # An empty name makes Vagrant and network-up pick or create a switch named "" (or any).
        if not v.strip() or any(ord(ch) < 32 for ch in v):
            raise ValueError("must name a Hyper-V virtual switch (Get-VMSwitch lists them), on one line, not empty")
        return v


# libvirt names networks and storage pools with these characters (virsh net-define accepts more, but
# the name becomes a file name under /etc/libvirt and a Vagrant option; keep it plain).
LIBVIRT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,49}")


class Host(Strict):
    """The virtualization on the machine that runs k4w."""

    provider: Literal["hyperv", "libvirt"] = "hyperv"
    """hyperv: Windows 10/11 with Hyper-V (settings under hyperv). libvirt: a Linux host with libvirt, QEMU and
    vagrant-libvirt (settings under libvirt). The rest of cluster.yml means the same on both."""


class Libvirt(Strict):
    """The libvirt host: its connection, storage pool and the two networks every VM has a NIC on."""

    uri: str = "qemu:///system"
    """The libvirt connection (virsh uri); qemu:///system is where vagrant-libvirt and network-up work by default."""
    storage_pool: str = "default"
    """The storage pool the VM disks and box images go to (virsh pool-list)."""
    accelerator: Literal["kvm", "tcg"] = "kvm"
    """kvm: hardware virtualization (/dev/kvm). tcg: QEMU's emulation where KVM is unusable, roughly ten times slower;
    `invoke doctor` says which the host can use."""
    management_network: str = "k4w-management"
    """The network of each VM's management NIC (DHCP from libvirt): Vagrant and SSH use it, and it carries outbound
    traffic. `invoke network-up` defines it."""
    management_cidr: ipaddress.IPv4Network = ipaddress.IPv4Network("192.168.123.0/24")
    """The management network's subnet; the host holds its first address and libvirt's DHCP hands out the rest."""
    management_forward: Literal["nat", "none"] = "nat"
    """nat: VMs reach the outside through the host (downloads, the proxy). none: an isolated network, for hosts
    where the proxy or a mirror sits on the management network itself."""
    cluster_network: str = "k4w-cluster"
    """The isolated network of each VM's cluster NIC, which has the node's static ip; the host holds the first address
    of network.node_cidr. `invoke network-up` defines it."""

    @field_validator("storage_pool", "management_network", "cluster_network")
    @classmethod
    def _name(cls, v: str) -> str:
        if not LIBVIRT_NAME.fullmatch(v):
            raise ValueError("must be 1-50 letters, digits, '_', '.' or '-', starting with a letter or digit")
        return v

    @field_validator("uri")
    @classmethod
    def _uri(cls, v: str) -> str:
        # A libvirt URI names a driver and a scheme (https://libvirt.org/uri.html): qemu:///system, qemu+ssh://host/system.
        if not re.fullmatch(r"qemu(\+[a-z]+)?://[^\s]*/(system|session)", v):
            raise ValueError("must be a QEMU libvirt URI such as qemu:///system (https://libvirt.org/uri.html)")
        return v

    @field_validator("management_cidr", mode="before")
    @classmethod
    def _cidr(cls, v):
        try:
            net = ipaddress.IPv4Network(str(v), strict=True)
        except ValueError as exc:
            raise ValueError(f"not an IPv4 network in CIDR form with host bits zero ({exc})") from None
        if net.prefixlen > 29 or not any(net.subnet_of(private) for private in _RFC1918):
            raise ValueError(f"{net}: use a private (RFC 1918) range of /29 or larger")
        return net


class Downloads(Strict):
    """Where `invoke fetch` keeps components (k4w.bake.cache) and where it gets them from."""

    cache: str | None = None
    """The folder `invoke fetch` keeps components in, relative to this file's folder, ~ expanded. null:
    %LOCALAPPDATA%\\k4w\\cache on Windows, ~/.cache/k4w elsewhere. --cache and K4W_CACHE win over it."""
    mirror: str | None = None
    """The base URL of an internal download mirror (Artifactory, Nexus): each file is fetched from <mirror>/<original
    host>/<original path>. http(s), optional user:password@ and path, no query or fragment. null: the original URLs."""
    images: Literal["registry", "cache"] = "registry"
    """Where a bake gets its container images. registry: the guest pulls them, through the proxy and registry.mirrors.
    cache: the host pulls them into its image cache first (invoke fetch --images; digests pinned with invoke
    pin-images), and each box imports them from the build host (Ubuntu: Packer's HTTP server; Windows: the build
    CD), checked against the pinned digests: its guest asks no registry. The containerd era imports OCI layouts,
    the Docker-era Ubuntu box loads docker-save archives; windows-1803 still pulls."""

    @field_validator("cache")
    @classmethod
    def _cache(cls, v: str | None) -> str | None:
        return optional_path(v, "must be a folder path on one line, e.g. D:/k4w-cache or ~/.cache/k4w")

    @field_validator("mirror")
    @classmethod
    def _mirror(cls, v: str | None) -> str | None:
        if v in (None, ""):
            return None
        m = MIRROR_URL.fullmatch(v)
        if not m:
            if re.fullmatch(r"https?://[^@/]*@.*", v, flags=re.S):
                raise ValueError(f"the user:password part has a character a URL cannot carry as is; {PERCENT_ENCODE_HINT}")
            raise ValueError("must be an http:// or https:// base URL such as https://artifactory.corp.example/artifactory/k4w "
                             "(no query or fragment: component paths are appended to it)")
        if m["port"] is not None and not 0 < int(m["port"]) < 65536:
            raise ValueError(f"port {m['port']} is not between 1 and 65535")
        return v.rstrip("/")


# An upstream registry as an image reference names it (distribution/reference's domain: a DNS
# name with a dot, or with a port), e.g. registry.k8s.io, docker.io, mcr.microsoft.com, ghcr.io.
REGISTRY_HOST = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)+(?::\d{1,5})?")
# A registry mirror's endpoint: the proxy URL's scheme, userinfo and host rules, an optional port,
# and an optional repository prefix (a Harbor proxy-cache project, /k8s-proxy) made of the path
# components an image name allows (distribution/reference: lower-case alphanumerics and . _ -).
REGISTRY_ENDPOINT = re.compile(
    rf"(?P<scheme>https?)://(?:(?P<userinfo>(?P<user>{_USERCHAR}*)(?::(?P<password>(?:{_USERCHAR}|:)*))?)@)?"
    r"(?P<host>[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])(?::(?P<port>\d{1,5}))?"
    r"(?P<path>(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)/?"
)
# A CA bundle is a few certificates; a bigger file is the wrong file.
MAX_CA_BYTES = 64 * 1024


_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----.*?-----END \1-----", re.S)


def _pem_certificates_problem(data: bytes) -> str | None:
    """Why DATA is not a bundle of X.509 certificates that containerd (Go's AppendCertsFromPEM) would
    trust, or None: every PEM block must be closed by its END line and be a CERTIFICATE that parses.
    Text between blocks (a bundle's "# Issuer:" comments) is allowed, as Go skips it."""
    blocks = list(_PEM_BLOCK.finditer(data))
    if not blocks or data.count(b"-----BEGIN") != len(blocks):
        return "a PEM block is not closed by its -----END line"
    for index, block in enumerate(blocks, 1):
        if block[1] != b"CERTIFICATE":
            return f"PEM block {index} is a {block[1].decode()}, not a CERTIFICATE"
        try:
            x509.load_pem_x509_certificate(block[0])
        except ValueError:
            return f"PEM block {index} does not parse as an X.509 certificate"
    return None


class RegistryMirror(Strict):
    """One upstream registry's mirror (docs/registry-mirrors.md). The credentials, when the mirror
    needs them, are the endpoint's user:password@, like proxy.http's: redacted everywhere, and in
    the guests only in containerd's registry auth file (owner-only; an ACL on Windows)."""

    endpoint: str
    """The mirror's URL: https://[user:password@]host[:port][/repository-prefix], lower-case path without /v2.
    Credentials are redacted everywhere and reach the guests only in containerd's owner-only auth file."""
    ca: str | None = None
    """The PEM file of the CA certificate(s) that signed the mirror's certificate, relative to this file's folder; no
    private key. null: the system's CAs."""
    # http:// only with this set: an air-gapped lab registry (registry:2 without TLS on the cluster
    # switch) has no certificate, and plain HTTP lets anyone on the path swap manifests, so k4w
    # never falls back to it on its own (containerd's --plain-http, Docker's insecure-registries).
    plain_http: StrictBool = False
    """true allows an http:// endpoint without TLS (an air-gapped lab registry): anyone on the path can change the
    images. Only with http://, and no credentials."""

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, v: str) -> str:
        m = REGISTRY_ENDPOINT.fullmatch(v)
        if not m:
            if re.fullmatch(r"https?://[^@/]*@.*", v, flags=re.S):
                raise ValueError(f"the user:password part has a character a URL cannot carry as is; {PERCENT_ENCODE_HINT}")
            raise ValueError("must be an https:// URL of the mirror such as https://mirror.corp.example:5000, optionally with "
                             "a repository prefix (https://harbor.corp.example/k8s-proxy): lower-case path, no query or fragment")
        if m["port"] is not None and not 0 < int(m["port"]) < 65536:
            raise ValueError(f"port {m['port']} is not between 1 and 65535")
        if m["path"] == "/v2" or m["path"].startswith("/v2/"):
            raise ValueError(f"give the repository prefix without the registry API's /v2 (e.g. {m['scheme']}://{m['host']}"
                             f"{m['path'][3:] or ''}): k4w and containerd add /v2 themselves")
        if m["userinfo"] is not None and (not m["user"] or m["password"] is None):
            raise ValueError("credentials must be user:password@ (both); leave them out for an anonymous mirror")
        return v.rstrip("/")

    @field_validator("ca")
    @classmethod
    def _ca(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v in (None, ""):
            return None
        base = Path((info.context or {}).get("config_dir") or ".")
        path = (base / Path(v).expanduser()).resolve()
        try:
            data = private.read_bounded(path, MAX_CA_BYTES)   # a FIFO or /dev/zero named here is refused, not waited on
        except private.UnreadableFile as exc:
            if exc.reason == "does not exist":
                raise ValueError(f"CA file {path} does not exist (a relative path is taken from the folder of the config file)") from None
            if exc.reason.startswith("is a folder"):
                raise ValueError(f"{path} is a folder; ca takes a PEM file of CA certificates") from None
            if exc.reason.startswith("is larger than"):
                raise ValueError(f"CA file {path} is larger than {MAX_CA_BYTES // 1024} KiB; give the mirror's CA certificate(s) only") from None
            raise ValueError(f"CA file {path} {exc.reason}") from None
        if b"-----BEGIN CERTIFICATE-----" not in data or b"PRIVATE KEY" in data:
            raise ValueError(f"CA file {path} must hold PEM certificates (-----BEGIN CERTIFICATE-----) and no private key")
        if problem := _pem_certificates_problem(data):
            raise ValueError(f"CA file {path}: {problem}; give the mirror's CA certificate(s) in PEM")
        return str(path)

    @property
    def host(self) -> str:
        """host[:port] as containerd keys its hosts.toml folders and credentials: lower case."""
        m = REGISTRY_ENDPOINT.fullmatch(self.endpoint)
        return m["host"].lower() + (f":{int(m['port'])}" if m["port"] else "")

    @property
    def userinfo(self) -> str | None:
        """user:password of the endpoint, None for an anonymous mirror."""
        return REGISTRY_ENDPOINT.fullmatch(self.endpoint)["userinfo"]

    @property
    def path(self) -> str:
        """The repository prefix after the host ('' for none), e.g. /k8s-proxy."""
        return REGISTRY_ENDPOINT.fullmatch(self.endpoint)["path"]

    @model_validator(mode="after")
    def _scheme_rules(self) -> "RegistryMirror":
        m = REGISTRY_ENDPOINT.fullmatch(self.endpoint)
        if m["scheme"] == "http" and not self.plain_http:
            raise ValueError("endpoint is http://: use https://, or set plain_http: true for a registry that has no TLS "
                             "(anyone on the path can then change the images)")
        if m["scheme"] == "https" and self.plain_http:
            raise ValueError("plain_http: true needs an http:// endpoint; an https:// mirror is verified, leave plain_http out")
        if m["scheme"] == "http" and m["userinfo"] is not None:
            raise ValueError("credentials over plain HTTP would cross the network readable; use an https:// endpoint")
        if m["scheme"] == "http" and self.ca:
            raise ValueError("ca is for an https:// endpoint; an http:// one has no certificate")
        return self


class Registry(Strict):
    """Container image mirrors, per upstream registry."""

    # upstream registry host -> its mirror
    mirrors: dict[str, RegistryMirror] = Field(default_factory=dict)
    """Upstream registry host as image names spell it (registry.k8s.io, docker.io, mcr.microsoft.com) -> its mirror. A
    Docker (seed-era) box takes a docker.io mirror and one for its Kubernetes image registry only, https with a public
    CA and no credentials."""

    @field_validator("mirrors", mode="before")
    @classmethod
    def _upstreams(cls, v):
        if isinstance(v, dict):
            # A port as a URL allows it: 1-65535 (RFC 6335's port range).
            bad = [key for key in v if not isinstance(key, str) or not REGISTRY_HOST.fullmatch(key)
                   or (":" in key and not 0 < int(key.rsplit(":", 1)[1]) < 65536)]
            if bad:
                raise ValueError(f"{', '.join(map(repr, bad))}: each key is an upstream registry host as image names "
                                 "spell it, lower case, e.g. registry.k8s.io, docker.io, mcr.microsoft.com, ghcr.io, "
                                 "with a port only between 1 and 65535")
        return v


class Node(Strict):
    """One VM of the cluster."""

    name: str
    """The VM's host name and Kubernetes node name: 1-15 lower-case letters, digits or '-' (a Windows computer name is at
    most 15), unique, not digits only on Windows."""
    role: Literal["master", "worker"]
    """master runs the kubeadm control plane: exactly one node, Linux, none with cluster.existing. Every other node is a
    worker."""
    box: str
    """The box profile the VM is built from: the name of a file boxes/<box>.yml, e.g. ubuntu-1604 or windows-2022."""
    ip: ipaddress.IPv4Address
    """The static IP of the VM's cluster NIC: unique, inside network.node_cidr, not its network, broadcast or gateway
    address."""
    # Strict: YAML's true would otherwise become 1 CPU, and "2048" a number.
    cpus: StrictInt = Field(2, ge=1, le=64)
    """Virtual CPUs."""
    memory: StrictInt = Field(2048, ge=256, le=262144)
    """Memory in MiB: a multiple of 2 (Hyper-V refuses others), at least the box profile's min_memory_mb."""

    @field_validator("memory")
    @classmethod
    def _memory_aligned(cls, v: int) -> int:
        # Hyper-V's New-VM/Set-VMMemory refuse a size that is not 2 MiB aligned ("Memory values
        # must be properly aligned", e.g. 4019 and 4077 MB in kubernetes/minikube#6964 and #6973;
        # minikube refuses an odd MB since kubernetes/minikube#17325).
        if v % 2:
            raise ValueError(f"{v} MiB is not a multiple of 2 MiB, which Hyper-V refuses; use {v - 1} or {v + 1}")
        return v

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME.fullmatch(v):
            raise ValueError("must be 1-15 lowercase letters, digits or '-' (a Windows computer name is at most 15)")
        return v


class Config(Strict):
    """cluster.yml: the one file a user edits; every artifact is rendered from it. Loading it also checks rules across
    fields that a JSON Schema cannot express: exactly one master (none with cluster.existing), unique node names and
    IPs, each node's box exists and supports network.backend and its memory, kubelet versions within the master's skew
    policy, and registry mirrors the boxes' container runtime can use."""

    cluster: Cluster = Cluster()
    """Naming and timing of the whole cluster."""
    proxy: Proxy = Proxy()
    """The corporate HTTP proxy; without one, leave http and https null."""
    network: Network = Network()
    """Address ranges and the Flannel backend."""
    host: Host = Host()
    """Which virtualization this host has: Hyper-V or libvirt."""
    hyperv: HyperV = HyperV()
    """The Hyper-V virtual switches (host.provider hyperv)."""
    libvirt: Libvirt = Libvirt()
    """The libvirt connection and networks (host.provider libvirt)."""
    downloads: Downloads = Downloads()
    """Where components are downloaded from and kept."""
    registry: Registry = Registry()
    """Container image mirrors."""
    nodes: list[Node]
    """The VMs, in the order cluster-up brings them up; at least one."""

    @field_validator("nodes")
    @classmethod
    def _some_nodes(cls, v: list[Node]) -> list[Node]:
        if not v:
            raise ValueError("the list is empty; a cluster needs one master node (see the nodes in the example cluster.yml)")
        return v

    @model_validator(mode="after")
    def _cluster_rules(self) -> "Config":
        # Rules between fields, and between the nodes and their boxes (k4w.model.config_rules): one error
        # of many lines, which _explain splits and gives each its line in the file.
        problems = config_rules.problems(self)
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def document(self) -> dict:
        """This config as a cluster.yml document that loads back to the same config: every value, but only
        this host's provider block (the other provider's block is refused on load, config_rules says why)."""
        other = {"hyperv": "libvirt", "libvirt": "hyperv"}[self.host.provider]
        return self.model_dump(mode="json", exclude={other})

    @property
    def joins_existing(self) -> bool:
        """True when the nodes join a cluster k4w did not make (cluster.existing)."""
        return bool(self.cluster.existing)

    @property
    def master(self) -> Node:
        found = next((n for n in self.nodes if n.role == "master"), None)
        if found is None:
            raise K4wError(f"cluster {self.cluster.name} joins the existing cluster of {self.cluster.existing} "
                           "and has no master node of its own")
        return found

    @property
    def era_node(self) -> Node:
        """The node whose box profile decides the cluster's Kubernetes era (kubeadm API, images):
        the master, or for cluster.existing the first Linux worker, else the first node."""
        if not self.joins_existing:
            return self.master
        linux = [n for n in self.nodes if not profiles.load(n.box).is_windows]
        return (linux or self.nodes)[0]

    def boxes(self) -> list[str]:
        """Boxes used by the nodes, in first-use order."""
        return list(dict.fromkeys(n.box for n in self.nodes))


# ---------------------------------------------------------------- loading with line numbers

class _LineLoader(yaml.SafeLoader):
    """SafeLoader that also records the line of every mapping key and sequence item."""


_STR_TAG = "tag:yaml.org,2002:str"


def _compose_marks(node: yaml.Node, path: tuple, marks: dict) -> None:
    marks[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key, _ in node.value:
            # Every key of cluster.yml is a name; 5: or yes: or [a]: as a key is a typo, and
            # YAML would hand it over as a number, a bool or a list.
            if not isinstance(key, yaml.ScalarNode) or key.tag != _STR_TAG:
                shown = key.value if isinstance(key, yaml.ScalarNode) else "a list or mapping"
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {shown} is not a string; keys are names such as 'name' or 'role' "
                    "(quote it if you mean the text)", key.start_mark)
            if key.value in seen:  # the duplicate's own line: that is the one a user must delete
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key.value}", key.start_mark)
            seen.add(key.value)
        for key, value in node.value:
            _compose_marks(value, path + (key.value,), marks)
            # Point at the key, not at the first line of a nested value.
            marks[path + (key.value,)] = key.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _compose_marks(item, path + (i,), marks)


def _line_for(loc: tuple, marks: dict) -> int | None:
    loc = tuple(loc)
    while loc:
        if loc in marks:
            return marks[loc]
        loc = loc[:-1]
    return None


def _format_loc(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


_NODE_FIELD = re.compile(r"(nodes\[(\d+)\](?:\.(\w+))?|network\.(\w+))")
_REGISTRY_FIELD = re.compile(r"registry\.mirrors\.(\S+?): ")


# Bounds that no real cluster.yml comes near; past them a file is refused before it is built
# into objects, in bounded time and memory (a 700-byte "billion laughs" alias file otherwise
# expands to gigabytes).
MAX_BYTES = 1024 * 1024
MAX_DEPTH = 16


def _refuse_aliases_and_depth(text: str, source: str) -> None:
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            line = event.start_mark.line + 1
            raise ConfigError(source, [f"line {line}: YAML anchors and aliases (&name, *name) are not allowed in this file; write the values out"])
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                raise ConfigError(source, [f"line {event.start_mark.line + 1}: nested more than {MAX_DEPTH} levels deep; cluster.yml is at most a few levels"])
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


def parse(text: str, source: str = "cluster.yml") -> Config:
    if len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise ConfigError(source, [f"the file is larger than {MAX_BYTES // 1024} KiB; this is not a cluster.yml"])
    try:
        _refuse_aliases_and_depth(text, source)
    except yaml.YAMLError:
        pass  # reported with its line by the full parse below
    try:
        document = yaml.compose(text, Loader=_LineLoader)
        marks: dict = {}
        if document is not None:
            _compose_marks(document, (), marks)
        data = yaml.safe_load(text)
    except yaml.reader.ReaderError as exc:
        # A character YAML refuses (a NUL byte, a control character): the reader gives an offset only.
        line = text[: exc.position].count("\n") + 1
        column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        raise ConfigError(source, [f"line {line}, column {column}: malformed YAML: character {exc.character:#06x} "
                                   "is not allowed in a YAML file (a NUL or control byte: is this a text file?)"]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        context = getattr(exc, "context_mark", None)
        # An unclosed bracket or quote is found lines later; point at where it was opened too.
        if context and (not mark or context.line != mark.line):
            problem += f" ({getattr(exc, 'context', None) or 'started'} at line {context.line + 1})"
        raise ConfigError(source, [f"{where}malformed YAML: {problem}"]) from None
    if not isinstance(data, dict):
        raise ConfigError(source, ["the file must be a mapping with at least a 'nodes' list"])
    try:
        return Config.model_validate(data, context={"config_dir": str(Path(source).parent)})
    except ValidationError as exc:
        raise ConfigError(source, _explain(exc, marks)) from None


def _explain(exc: ValidationError, marks: dict) -> list[str]:
    problems = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key (check the spelling; see the comments in cluster.yml for every key)"
        if err["type"] == "missing":
            msg = "required key is missing"
        # Cross-field rules raise one error at the model; split them and find each line.
        for piece in msg.split("\n") if loc in ((), ("network",)) else [msg]:
            field_loc = loc
            m = _NODE_FIELD.match(piece)
            if m and m.group(2) is not None:
                field_loc = ("nodes", int(m.group(2))) + ((m.group(3),) if m.group(3) else ())
            elif m and m.group(4):
                field_loc = ("network", m.group(4))
            elif piece.startswith("nodes:"):
                field_loc = ("nodes",)
            elif registry := _REGISTRY_FIELD.match(piece):
                field_loc = ("registry", "mirrors", registry.group(1))
            elif piece.startswith(("node_cidr", "pod_cidr", "service_cidr")):
                field_loc = ("network", piece.split()[0])
                piece = f"network.{piece}"
            line = _line_for(field_loc, marks)
            prefix = f"line {line}: " if line else ""
            label = "" if m or piece.startswith(("network.", "nodes", "registry.")) else f"{_format_loc(loc)}: "
            problems.append(f"{prefix}{label}{piece}")
    return problems


def load(path: str | Path) -> Config:
    path = Path(path)
    try:
        # A regular file of at most 1 MiB: /dev/zero, a FIFO or a 2 GiB file is refused, never
        # waited on or read whole into memory.
        raw = private.read_bounded(path, MAX_BYTES)
    except private.UnreadableFile as exc:
        if exc.reason == "does not exist":
            hint = ("run invoke from the repository root, where cluster.yml is, or pass --config FILE"
                    if path == Path("cluster.yml") else "check the path given to --config")
            raise ConfigError(str(path), [f"file not found in {Path.cwd()} ({hint})"]) from None
        if exc.reason.startswith("is a folder"):
            raise ConfigError(str(path), ["is a directory; --config takes a YAML file such as cluster.yml"]) from None
        if exc.reason.startswith("is larger than"):
            raise ConfigError(str(path), [f"the file is larger than {MAX_BYTES // 1024} KiB; this is not a cluster.yml"]) from None
        raise ConfigError(str(path), [exc.reason]) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(str(path), [f"line {line}: not UTF-8 text (byte {exc.start}); save the file as UTF-8"]) from None
    return parse(text, str(path))
