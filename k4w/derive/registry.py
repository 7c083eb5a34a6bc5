"""Container image mirrors (cluster.yml `registry.mirrors`): what each runtime is told, decided once.

containerd (the containerd era, both OSes) reads one `hosts.toml` per registry host from its
`config_path` folder (containerd v2.3.7 docs/hosts.md; the CRI `registry.mirrors` settings are
deprecated and go in 2.4). A mirror is written as a `[host."<endpoint>"]` of the upstream's
folder, with capabilities pull and resolve (a private mirror: docs/hosts.md's table), so pulls of
`registry.k8s.io/...` go to the mirror and fall back to the upstream only when it fails. The CA a
mirror needs is shipped beside its hosts.toml as `ca.crt`, named by a relative path (hosts.md: "All
paths ... may be absolute or relative to the hosts.toml file"), so one tree serves Linux
(/etc/containerd/certs.d) and Windows (C:\\Program Files\\containerd\\certs.d) alike.

hosts.toml has no credentials field at v2.3.7 (core/remotes/docker/config/hosts.go hostFileConfig:
capabilities, ca, client, skip_verify, header, override_path, dial_timeout). The CRI plugin's
`registry.configs.<host>.auth` still works beside `config_path` at v2.3.7: the CRI pull's
credentials callback reads `Registry.Configs[host]` for the host it contacts, the mirror
(internal/cri/server/images/image_pull.go PullImage). It is deprecated: its Go comment says "Remove in
containerd 2.3" (internal/cri/config/config.go), yet 2.3.7 still reads it, and docs/cri/registry.md at
the tag says it "will not be removed until a suitable secret management alternative is available as a
plugin". So the credentials sit in a drop-in of their own that containerd imports, owner-only, and a
containerd bump must re-check this (`invoke validate` has the pinned containerd read the drop-in). The kubelet's image credential provider would need a plugin binary nobody pins, and the
kubelet's config.json covers only the kubelet's own pulls, not kubeadm's nor the sandbox image's.

containerd boxes keep every image's upstream name (kubeadm's `imageRepository`, the pause image):
their upstream's hosts.toml sends the pull to the mirror, which is asked for the same repository
(`?ns=<upstream>`), so a pull-through cache fetches a name the upstream publishes. Naming the mirror
instead would change what kubeadm asks for: it keeps CoreDNS's `coredns/` path only under the
default repository (k8s.io/kubernetes@v1.37.2 cmd/kubeadm/app/images/images.go GetDNSImage), so
`<mirror>/coredns:<tag>` would be fetched as `registry.k8s.io/coredns:<tag>`, which is not published.
Only Docker boxes (seed era) name the mirror in `imageRepository` and the pause image (`apply`):
Docker can be pointed nowhere else for them. kubeadm 1.11 names CoreDNS `<repository>/coredns` under
every repository, so there the names map back to ones registry.k8s.io publishes
(k4w/validate/facts/upstream-images.yml; `invoke validate` holds every pull of k4w.derive.images against it).
Docker (seed era) mirrors docker.io only (daemon.json `registry-mirrors`, Docker's docs "Registry as
a pull through cache": "It's currently not possible to mirror another private registry. Only the
central Hub can be mirrored."): k4w.model.config refuses other registries for a Docker box.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from k4w.derive import containerd_config
from k4w.outdir import private
from k4w.model.config import MAX_CA_BYTES, REGISTRY_ENDPOINT, Config, RegistryMirror
from k4w.infra.errors import K4wError
from k4w.model.profiles import Attr, Profile

# The hosts.toml comment line that marks a folder as k4w's own: the guest steps replace or remove
# only folders whose hosts.toml starts with it, and leave a user's own folders alone.
MARKER = "# k4w: written from cluster.yml registry.mirrors"
HOSTS_FILE = "hosts.toml"
CA_FILE = "ca.crt"
# Docker Hub's image names: docker.io is the domain distribution/reference gives a name without one.
DOCKER_HUB = "docker.io"
# Name suffixes that are never on the Internet, so a mirror there is reached around the proxy:
# RFC 6762 (.local), RFC 8375 (.home.arpa), ICANN's reserved private-use .internal (2024).
_INTERNAL_SUFFIXES = (".local", ".home.arpa", ".internal")


@dataclass(frozen=True)
class Mirror:
    upstream: str  # the registry image names spell: registry.k8s.io
    scheme: str  # https, or http with plain_http
    host: str  # host[:port] of the mirror, as an image name spells it
    path: str  # the repository prefix, "" or "/k8s-proxy"
    user: str | None
    password: str | None
    ca_pem: str | None

    @classmethod
    def of(cls, upstream: str, spec: RegistryMirror) -> "Mirror":
        m = REGISTRY_ENDPOINT.fullmatch(spec.endpoint)
        host = m["host"].lower() + (f":{int(m['port'])}" if m["port"] else "")
        ca_pem = cls.read_ca(spec.ca) if spec.ca else None
        # containerd sends the user and password as given, so the percent-encoding cluster.yml
        # needs (docs/registry-mirrors.md) is undone here.
        user = unquote(m["user"]) if m["userinfo"] is not None else None
        password = unquote(m["password"]) if m["userinfo"] is not None else None
        return cls(upstream=upstream, scheme=m["scheme"], host=host, path=m["path"].rstrip("/"),
                   user=user, password=password, ca_pem=ca_pem)

    @staticmethod
    def read_ca(path: str) -> str:
        """The CA file config validation accepted, read again the bounded way (a FIFO or a device swapped
        in since is refused, not waited on)."""
        try:
            return private.read_bounded(Path(path), MAX_CA_BYTES).decode("ascii")
        except private.UnreadableFile as exc:
            raise K4wError(f"registry mirror CA file {exc}") from None
        except UnicodeDecodeError:
            raise K4wError(f"registry mirror CA file {path} is not ASCII PEM text") from None

    @property
    def image_prefix(self) -> str:
        """What an image name starts with to come from this mirror directly."""
        return self.host + self.path

    @property
    def server(self) -> str:
        return f"{self.scheme}://{self.host}"

    @property
    def host_url(self) -> str:
        """The hosts.toml [host] key. A repository prefix is a path under the registry API's /v2
        (/v2/k8s-proxy/<name>, as a direct pull of image_prefix/<name> asks), which containerd
        takes only with override_path (hosts.go parseHostConfig appends /v2 after any other path)."""
        return f"{self.server}/v2{self.path}" if self.path else self.server

    @property
    def name(self) -> str:
        """The host without port or IPv6 brackets, as NO_PROXY takes it (every port)."""
        if self.host.startswith("["):
            return self.host[1:self.host.index("]")]
        return self.host.split(":", 1)[0]

    @property
    def reached_directly(self) -> bool:
        """True when the mirror cannot be on the Internet, so it must be in NO_PROXY."""
        try:
            address = ipaddress.ip_address(self.name)
        except ValueError:
            return "." not in self.name or self.name.endswith(_INTERNAL_SUFFIXES)
        return not address.is_global


def mirrors(cfg: Config) -> list[Mirror]:
    return [Mirror.of(upstream, spec) for upstream, spec in sorted(cfg.registry.mirrors.items())]


def host_dir(host: str) -> str:
    """containerd's folder for a registry host: "host:port" as "host_port_", the name it looks
    for first on every OS (core/remotes/docker/config/hosts.go hostDirectory, hostPaths at v2.3.7;
    Windows allows no ':' in a file name)."""
    name, sep, port = host.rpartition(":")
    return f"{name}_{port}_" if sep and port.isdigit() and not host.endswith("]") else host


def _toml_string(value: str) -> str:
    """A TOML basic string (toml.io v1.0.0 "String"): backslash, quote and control characters escaped."""
    out = []
    for ch in value:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _host_table(mirror: Mirror) -> list[str]:
    lines = [f"[host.{_toml_string(mirror.host_url)}]",
             # pull and resolve: a private mirror the user trusts with tag resolution, never push
             # (docs/hosts.md, "capabilities field").
             '  capabilities = ["pull", "resolve"]']
    if mirror.ca_pem:
        lines.append(f"  ca = {_toml_string(CA_FILE)}")
    if mirror.path:
        lines.append("  override_path = true")
    return lines


def certs_d(cfg: Config) -> dict[str, str]:
    """containerd's config_path tree: {"<host dir>/<file>": text}, one folder per upstream with its
    mirror. No folder for the mirror host itself: no image k4w pulls on a containerd box names it
    (`apply`), and an IPv6 mirror's folder name would hold a ':', which Windows refuses in a file name
    (containerd v2.3.7 core/remotes/docker/config/hosts.go hostDirectory maps only the last ':')."""
    files: dict[str, str] = {}
    for mirror in mirrors(cfg):
        folder = host_dir(mirror.upstream)
        files[f"{folder}/{HOSTS_FILE}"] = "\n".join(
            [MARKER, f"# {mirror.upstream} through its mirror; the upstream stays the fallback."]
            + _host_table(mirror)) + "\n"
        if mirror.ca_pem:
            files[f"{folder}/{CA_FILE}"] = mirror.ca_pem
    return files


# The CRI images plugin's table (containerd v2.3.7 docs/cri/config.md; the same name in config
# versions 3 and 4).
CRI_IMAGES = "plugins.'io.containerd.cri.v1.images'"


def auth_toml(cfg: Config) -> str:
    """containerd's drop-in with each mirror's credentials, keyed by the mirror host the CRI pull
    contacts; "" when no mirror has any. It holds passwords: owner-only wherever it goes."""
    seen: dict[str, Mirror] = {}
    for mirror in mirrors(cfg):
        if mirror.user is not None:
            seen.setdefault(mirror.host, mirror)
    if not seen:
        return ""
    lines = ["# k4w: registry mirror credentials from cluster.yml (owner-only; docs/registry-mirrors.md)",
             f"version = {containerd_config.CONFIG_VERSION}"]
    for host, mirror in seen.items():
        lines += ["", f"[{CRI_IMAGES}.registry.configs.{_toml_string(host)}.auth]",
                  f"  username = {_toml_string(mirror.user)}",
                  f"  password = {_toml_string(mirror.password or '')}"]
    return "\n".join(lines) + "\n"


def encode_files(files: dict[str, str]) -> str:
    """The certs.d tree as one step variable: blank-separated `<folder>/<file>=<base64>` entries
    (no folder or file name holds a blank or '='; base64 holds no blank)."""
    return " ".join(f"{path}={base64.b64encode(text.encode('utf-8')).decode('ascii')}" for path, text in sorted(files.items()))


def no_proxy_hosts(cfg: Config) -> list[str]:
    """Mirror hosts that must be reached around the proxy: private or loopback addresses, names
    with no dot, and names under a suffix that is never public. A mirror under a company domain
    is the user's to list in proxy.no_proxy (docs/registry-mirrors.md)."""
    return list(dict.fromkeys(mirror.name for mirror in mirrors(cfg) if mirror.reached_directly))


def docker_registry_mirrors(cfg: Config) -> list[str]:
    """daemon.json's registry-mirrors for a Docker box: the docker.io mirror, if any."""
    spec = cfg.registry.mirrors.get(DOCKER_HUB)
    if spec is None:
        return []
    mirror = Mirror.of(DOCKER_HUB, spec)
    return [mirror.server + mirror.path]


def image_domain(image: str) -> tuple[str, str]:
    """(registry, rest) of an image reference, as distribution/reference v0.6.0 splitDockerDomain splits
    it: the first component is the registry when it is localhost, has a '.' or ':', or is not lowercase,
    else the name is on Docker Hub; index.docker.io is docker.io, and a one-component repository on
    Docker Hub is under library/."""
    first, sep, rest = image.partition("/")
    if not sep:
        return DOCKER_HUB, f"library/{image}"
    if first == "index.docker.io":
        first = DOCKER_HUB
    if not (first == "localhost" or "." in first or ":" in first or first.lower() != first):
        first, rest = DOCKER_HUB, image
    if first == DOCKER_HUB and "/" not in rest:
        rest = f"library/{rest}"
    return first, rest


def _domain(image: str) -> str:
    return image if "/" not in image and ("." in image or ":" in image) else image_domain(image)[0]


def rewrite_image(image: str, cfg: Config) -> str:
    """An image name (or a bare repository such as registry.k8s.io) under its registry's mirror."""
    domain = _domain(image)
    rest = "" if domain == image else image_domain(image)[1]
    spec = cfg.registry.mirrors.get(domain)
    if spec is None:
        return image
    prefix = Mirror.of(domain, spec).image_prefix
    return f"{prefix}/{rest}" if rest else prefix


def mirrors_serving(image: str, cfg: Config) -> list[str]:
    """The upstreams whose mirror's image prefix the image name starts with (rewrite_image's names)."""
    return sorted(domain for domain, spec in cfg.registry.mirrors.items()
                  if image.startswith(Mirror.of(domain, spec).image_prefix + "/"))


def upstream_image(image: str, cfg: Config) -> str:
    """The upstream name of an image rewrite_image put under a mirror (the image itself otherwise):
    a mirror serves the upstream's content, so facts about the upstream image hold for it. A prefix
    that several upstreams' mirrors share (one Nexus or Harbor group for all) names no single upstream:
    the image is returned as it is, and `invoke validate` refuses such a name (registry_rules)."""
    serving = mirrors_serving(image, cfg)
    if len(serving) != 1:
        return image
    domain = serving[0]
    prefix = Mirror.of(domain, cfg.registry.mirrors[domain]).image_prefix
    return f"{domain}/{image[len(prefix) + 1:]}"


# The registry host Docker Hub's API answers on (containerd v2.3.7 core/remotes/docker/config/hosts.go
# ConfigureHosts: docker.io -> registry-1.docker.io).
DOCKER_HUB_API = "registry-1.docker.io"


@dataclass(frozen=True)
class PullSource:
    """Where a host-side pull of an image asks, in the order a box's runtime would."""
    endpoint: str            # scheme://host[:port] of the registry API
    repository: str          # the path under /v2/ (a mirror's repository prefix included)
    namespace: str | None    # the upstream, sent as ?ns= to a mirror (containerd's resolver.go addNamespace)
    mirror: Mirror | None    # the mirror asked, None for the upstream itself

    @property
    def label(self) -> str:
        return f"the {self.mirror.upstream} mirror {self.mirror.server}" if self.mirror else self.endpoint


def split_reference(image: str) -> tuple[str, str, str]:
    """(registry, repository, tag or digest) of an image name; no tag means latest (distribution/reference)."""
    name, at, digest = image.partition("@")
    domain, rest = image_domain(name)
    repository, sep, tag = rest.rpartition(":")
    if not sep or "/" in tag:
        repository, tag = rest, "latest"
    return domain, repository, digest if at else tag


def stored_name(image: str) -> str:
    """The name containerd's CRI keeps an image under once it pulled `image`: distribution/reference
    ParseDockerRef (normalize.go at v0.6.0, which containerd v2.3.7 vendors): the domain and library/ made
    explicit, :latest added to a bare name, and of a name with both a tag and a digest only the digest kept
    ("both tagged and digested, only return digested"). An imported image must carry this name for the
    kubelet's request to find it."""
    domain, repository, reference = split_reference(image)
    return f"{domain}/{repository}{'@' if '@' in image else ':'}{reference}"


def pull_sources(image: str, cfg: Config) -> list[PullSource]:
    """Where a box's runtime fetches image: an upstream with a mirror through the mirror first, then the
    upstream (hosts.toml keeps it as the fallback); a name under a mirror's own prefix (a Docker box's
    kubeadm images, `apply`) from that mirror only; any other name from its registry."""
    domain, repository, _ = split_reference(image)
    serving = mirrors_serving(image, cfg)  # several only for a prefix `invoke validate` refuses
    if serving:
        # The name starts with the mirror's host and prefix, so its repository already holds the prefix.
        mirror = Mirror.of(serving[0], cfg.registry.mirrors[serving[0]])
        return [PullSource(mirror.server, repository, None, mirror)]
    upstream_api = f"https://{DOCKER_HUB_API if domain == DOCKER_HUB else domain}"
    direct = PullSource(upstream_api, repository, None, None)
    spec = cfg.registry.mirrors.get(domain)
    if spec is None:
        return [direct]
    mirror = Mirror.of(domain, spec)
    return [PullSource(mirror.server, f"{mirror.path.lstrip('/')}/{repository}" if mirror.path else repository, domain, mirror),
            direct]


def profile_registries(profile: Profile, cfg: Config) -> set[str]:
    """The upstream registries a box's images come from, by the names its profile pins (kubeadm's
    repository, the pause, Flannel, Windows base and HostProcess images), a name `apply` put under a
    mirror counted as its upstream's."""
    kube = profile.data.get("kubernetes") or {}
    names = [kube.get(key) for key in ("image_repository", "pause_image", "flannel_image", "flannel_cni_plugin_image")]
    names += list((profile.data.get("images") or {}).values()) + [(profile.data.get("hostprocess") or {}).get("image")]
    return {_domain(upstream_image(str(name), cfg)) for name in names if name}


def plan_rows(cfg: Config, profiles: dict[str, Profile]) -> list[list[str]]:
    """`invoke plan`'s table: each upstream -> its mirror endpoint (credentials redacted), how it is
    trusted, and the boxes whose images come from that upstream: none means a misspelled upstream."""
    rows = []
    for mirror in mirrors(cfg):
        spec = cfg.registry.mirrors[mirror.upstream]
        trust = "plain HTTP" if mirror.scheme == "http" else (f"CA {Path(spec.ca).name}" if spec.ca else "system CAs")
        login = f"{mirror.scheme}://***@" if mirror.user is not None else f"{mirror.scheme}://"
        boxes = [box for box, profile in profiles.items() if mirror.upstream in profile_registries(profile, cfg)]
        rows.append([mirror.upstream, f"{login}{mirror.host}{mirror.path}", trust,
                     ", ".join(boxes) or "none of this cluster's boxes (a misspelled upstream?)"])
    return rows


def apply(profile: Profile, cfg: Config) -> Profile:
    """A Docker box's profile with kubeadm's image repository and the pause image under their
    registry's mirror, so kubeadm, the kubelet and the bake's pre-pull all name the same image.
    Any other box is returned as it is: containerd reaches the mirror through hosts.toml (module
    docstring)."""
    kube = profile.data.get("kubernetes") or {}
    if profile.container_runtime == "containerd":
        return profile
    # Only the Kubernetes images' own registry: any other (windows-1803's Docker Hub pause image)
    # keeps its name and is mirrored by the runtime (hosts.toml, or Docker's registry-mirrors).
    kube_registry = str(kube.get("image_repository") or "registry.k8s.io").split("/")[0]
    changes = {key: rewrite_image(kube[key], cfg) for key in ("image_repository", "pause_image")
               if isinstance(kube.get(key), str) and kube[key] and _domain(kube[key]) == kube_registry}
    changes = {key: value for key, value in changes.items() if value != kube[key]}
    if not changes:
        return profile
    data = Attr.wrap(copy.deepcopy(dict(profile.data)))
    for key, value in changes.items():
        data["kubernetes"][key] = value
    return dataclasses.replace(profile, data=data)
