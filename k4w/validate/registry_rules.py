"""The image mirrors as each runtime will read them (cluster.yml registry.mirrors, k4w/derive/registry.py).

- containerd's hosts.toml files: TOML whose every key and capability containerd v2.3.7 knows
  (facts/containerd-2.3.7-hosts.yml), each `ca` a file k4w ships in the same folder, and no
  credentials in the tree (it is not a secret file);
- containerd's credentials drop-in: read by the real containerd of the pinned version
  (`containerd config dump` of a config that imports it), which must then show every mirror's user
  and log no "Configuration migrated" warning (a drop-in of an older schema is migrated at every
  start, k4w/derive/containerd_config.py);
- Docker boxes: daemon.json's registry-mirrors serves docker.io only;
- the proxy: a mirror that cannot be on the Internet is in the NO_PROXY every node gets;
- every image a box, kubeadm or a rendered manifest pulls reaches its upstream, through the mirror,
  under a name that upstream publishes (facts/upstream-images.yml): a pull-through cache fetches the
  path it is asked for, so a name the mirror rewrote must still be an upstream's name, and a mirror
  prefix that several upstreams share names none of them;
- certs.d folder names Windows can create (one tree serves both OSes).
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import tomllib
from collections.abc import Collection
from functools import lru_cache
from pathlib import Path

import yaml

from k4w.derive import containerd_config, registry
from k4w.derive.images import box_images
from k4w.infra import pinned_tools
from k4w.outdir import private
from k4w.derive.cluster import Cluster
from k4w.validate.result import Result
from k4w.validate.result import from_check

FACTS = Path(__file__).parent / "facts"
UPSTREAM_IMAGES = FACTS / "upstream-images.yml"
# Characters a Windows file name cannot hold (Microsoft Learn, "Naming Files, Paths, and Namespaces":
# < > : " / \ | ? * and the characters 0-31), nor may it end in a space or a period.
_WINDOWS_FORBIDDEN = re.compile(r'[<>:"/\\|?*\x00-\x1f]')


def _facts(version: str) -> dict:
    path = FACTS / f"containerd-{version}-hosts.yml"
    if not path.is_file():
        raise FileNotFoundError(path)
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def hosts_problems(files: dict[str, str], facts: dict) -> list[str]:
    """What containerd would not read, or k4w must not ship, in a certs.d tree {folder/file: text}."""
    problems = []
    for folder in sorted({path.split("/", 1)[0] for path in files}):
        if _WINDOWS_FORBIDDEN.search(folder) or folder.endswith((" ", ".")):
            problems.append(f"certs.d folder {folder!r}: Windows cannot create a folder of that name "
                            "(no < > : \" / \\ | ? * in a file name), and the tree is shipped to Windows nodes too")
    for path, text in sorted(files.items()):
        folder, name = path.split("/", 1)
        if name != registry.HOSTS_FILE:
            continue
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            problems.append(f"{path}: not valid TOML: {exc}")
            continue
        tables = [("(root)", {k: v for k, v in data.items() if k != "host"})]
        tables += [(f"host {key}", value) for key, value in (data.get("host") or {}).items()]
        for where, table in tables:
            allowed = set(facts["host_keys"]) | (set(facts["root_keys"]) if where == "(root)" else set())
            for key in sorted(set(table) - allowed):
                problems.append(f"{path}: {where}: {key} is not a hosts.toml key of containerd {facts['version']}")
            for capability in table.get("capabilities") or []:
                if capability not in facts["capabilities"]:
                    problems.append(f"{path}: {where}: capability {capability!r} is not one containerd {facts['version']} knows")
            ca = table.get("ca")
            for ca_file in ([ca] if isinstance(ca, str) else ca or []):
                if f"{folder}/{ca_file}" not in files:
                    problems.append(f"{path}: {where}: ca {ca_file} is not shipped beside it")
    return problems


def _effective_auth(auth: str) -> tuple[dict, list[str]]:
    """The drop-in as the pinned containerd reads it: `config dump` of a config that imports it
    (the main config of k4w's own version, so a migration warning can only be the drop-in's):
    (registry.configs as containerd reads them, or {"error": [its last line]}; its migration warnings)."""
    containerd = pinned_tools.require("containerd", "containerd")
    with tempfile.TemporaryDirectory(prefix="k4w-registry-auth-") as folder:  # created 0700
        drop_in = Path(folder) / "auth.toml"
        private.write_private(drop_in, auth)  # the drop-in holds passwords
        main = Path(folder) / "config.toml"
        main.write_text(f"version = {containerd_config.CONFIG_VERSION}\nimports = ['{drop_in.as_posix()}']\n", encoding="utf-8")
        res = subprocess.run([str(containerd), "--config", str(main), "config", "dump"], capture_output=True, text=True, timeout=60)
    if res.returncode != 0:
        return {"error": res.stderr.strip().splitlines()[-1:] or ["no output"]}, []
    dumped = tomllib.loads(res.stdout)
    configs = (((dumped.get("plugins") or {}).get("io.containerd.cri.v1.images") or {}).get("registry") or {}).get("configs") or {}
    return configs, containerd_config.migration_warnings(res.stderr)


@lru_cache(maxsize=None)
def upstream_facts() -> dict:
    return yaml.safe_load(UPSTREAM_IMAGES.read_text(encoding="utf-8"))


def canonical(image: str) -> str:
    """registry/repository:tag as published: no digest, Docker Hub's domain and library/ spelled out."""
    name = image.split("@", 1)[0]
    domain, rest = registry.image_domain(name)
    return f"{domain}/{rest}"


def published() -> frozenset[str]:
    return frozenset(canonical(name) for name in upstream_facts()["published"])


def manifest_images(out: Path) -> list[str]:
    """Every container image of the rendered manifests under OUT/manifests."""
    names: list[str] = []

    def walk(node) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("containers", "initContainers") and isinstance(value, list):
                    names.extend(str(c["image"]) for c in value if isinstance(c, dict) and c.get("image"))
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    for path in sorted((out / "manifests").rglob("*.yaml")) if (out / "manifests").is_dir() else []:
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            walk(document)
    return list(dict.fromkeys(names))


def fetched_as(image: str, cfg) -> tuple[str | None, str]:
    """(the upstream name a pull of IMAGE ends at, how it gets there), or (None, why no single
    upstream). An upstream with a mirror is asked for through it under the same path (hosts.toml,
    Docker's registry-mirrors); a name under a mirror's own prefix is fetched by the mirror from the
    upstream it caches, under the rest of the name."""
    name = image.split("@", 1)[0]
    domain = registry.image_domain(name)[0]
    if domain in cfg.registry.mirrors:
        return canonical(name), f"through the {domain} mirror"
    serving = registry.mirrors_serving(name, cfg)
    if len(serving) > 1:
        return None, (f"names a mirror prefix that serves {' and '.join(serving)}: the mirror cannot tell which upstream "
                      "it is from; keep the upstream name (containerd's hosts.toml sends it to the mirror)")
    if serving:
        return canonical(registry.upstream_image(name, cfg)), f"by the {serving[0]} mirror"
    return canonical(name), "directly"


def image_problems(cluster: Cluster, out: Path | None) -> tuple[int, list[str]]:
    """(how many image names were held, problems): every pull must end at a published upstream name."""
    cfg = cluster.config
    known = published()
    wanted: dict[str, list[str]] = {}
    problems: list[str] = []
    for box, profile in cluster.profiles.items():
        try:
            names = box_images(profile)
        except KeyError as exc:
            problems.append(f"{box}: {exc.args[0]}")
            continue
        for name in names:
            wanted.setdefault(name, []).append(box)
    for name in manifest_images(out) if out else []:
        wanted.setdefault(name, []).append("manifests/")
    for image, where in wanted.items():
        upstream, how = fetched_as(image, cfg)
        if upstream is None:
            problems.append(f"{image} ({', '.join(where)}) {how}")
        elif upstream not in known:
            problems.append(f"{image} ({', '.join(where)}) is fetched {how} as {upstream}, which its registry does not "
                            f"publish ({UPSTREAM_IMAGES.relative_to(FACTS.parent.parent.parent)}): the pull would fail")
    return len(wanted), problems


def check(cluster: Cluster, out: Path | None = None) -> tuple[list[str], list[str]]:
    cfg = cluster.config
    checked: list[str] = []
    problems: list[str] = []
    if not cfg.registry.mirrors:
        return ["no registry.mirrors in this config"], []
    runtimes = {profile.container_runtime: box for box, profile in cluster.profiles.items()}
    if "containerd" in runtimes:
        version = str(cluster.profile(runtimes["containerd"]).data.components.containerd.version)
        files = registry.certs_d(cfg)
        problems += hosts_problems(files, _facts(version))
        checked.append(f"{len(files)} certs.d file(s) against facts/containerd-{version}-hosts.yml")
        secrets = [m.password for m in registry.mirrors(cfg) if m.password]
        if any(secret in text for secret in secrets for text in files.values()):
            problems.append("a mirror's password is in the certs.d tree, which is not kept secret")
        auth = registry.auth_toml(cfg)
        if auth:
            configs, migrated = _effective_auth(auth)
            if "error" in configs:
                problems.append(f"containerd {version} refuses the credentials drop-in: {configs['error'][0]}")
            for warning in migrated:
                problems.append(f"containerd {version} migrates the credentials drop-in at every start: {warning}")
            by_host = {mirror.host: mirror for mirror in registry.mirrors(cfg) if mirror.user}  # one login per host
            for mirror in by_host.values():
                if ((configs.get(mirror.host) or {}).get("auth") or {}).get("username") != mirror.user:
                    problems.append(f"containerd {version} reads no credentials for {mirror.host} from the drop-in")
            checked.append(f"the credentials drop-in, by containerd {version} config dump")
    if "docker" in runtimes:
        wrong = [m for m in registry.docker_registry_mirrors(cfg) if not m.startswith(("https://", "http://"))]
        problems += [f"daemon.json registry-mirrors entry {m!r} is not a URL" for m in wrong]
        others = sorted(set(cfg.registry.mirrors) - {registry.DOCKER_HUB})
        kube_registry = registry.image_domain(str(cluster.profile(runtimes["docker"]).data.kubernetes.get("pause_image") or ""))[0]
        checked.append(f"Docker box {runtimes['docker']}: registry-mirrors for docker.io only (others: {', '.join(others) or 'none'}; "
                       f"pause image registry {kube_registry})")
    count, wrong = image_problems(cluster, out)
    problems += wrong
    checked.append(f"{count} image name(s) map to names their upstream publishes (facts/upstream-images.yml)")
    if cluster.proxy.enabled:
        for host in registry.no_proxy_hosts(cfg):
            if host not in cluster.proxy.no_proxy:
                problems.append(f"the internal mirror {host} is not in NO_PROXY")
        checked.append("internal mirrors in NO_PROXY")
    return checked, problems


# ------------------------------------------------------------------ the validator (k4w.validate.VALIDATORS)


def run(cluster: Cluster, out: Path) -> Result:
    return from_check("registry mirrors", "containerd's hosts.toml keys at the tag; the pinned containerd (config dump)",
                      check(cluster, out))


def would_run(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    if not cluster.config.registry.mirrors:
        return []
    return ["# in this process: the mirrors' hosts.toml against k4w/validate/facts/containerd-<version>-hosts.yml, every "
            "pulled image's upstream name against k4w/validate/facts/upstream-images.yml",
            "containerd --config <temporary config importing the credentials drop-in> config dump"]
