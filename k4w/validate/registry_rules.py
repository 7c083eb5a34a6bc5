"""The image mirrors as each runtime will read them (cluster.yml registry.mirrors, k4w/registry.py).

- containerd's hosts.toml files: TOML whose every key and capability containerd v2.3.7 knows
  (facts/containerd-2.3.7-hosts.yml), each `ca` a file k4w ships in the same folder, and no
  credentials in the tree (it is not a secret file);
- containerd's credentials drop-in: read by the real containerd of the pinned version
  (`containerd config dump` of a config that imports it), which must then show every mirror's user
  and log no "Configuration migrated" warning (a drop-in of an older schema is migrated at every
  start, k4w/containerd_config.py);
- Docker boxes: daemon.json's registry-mirrors serves docker.io only;
- the proxy: a mirror that cannot be on the Internet is in the NO_PROXY every node gets.
"""

from __future__ import annotations

import subprocess
import tempfile
import tomllib
from pathlib import Path

import yaml

from .. import containerd_config, pinned_tools, private, registry
from ..cluster_model import Cluster
from ..derive_steps import container_runtime

FACTS = Path(__file__).parent / "facts"


def _facts(version: str) -> dict:
    path = FACTS / f"containerd-{version}-hosts.yml"
    if not path.is_file():
        raise FileNotFoundError(path)
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def hosts_problems(files: dict[str, str], facts: dict) -> list[str]:
    """What containerd would not read, or k4w must not ship, in a certs.d tree {folder/file: text}."""
    problems = []
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


def check(cluster: Cluster) -> tuple[list[str], list[str]]:
    cfg = cluster.config
    checked: list[str] = []
    problems: list[str] = []
    if not cfg.registry.mirrors:
        return ["no registry.mirrors in this config"], []
    runtimes = {container_runtime(profile): box for box, profile in cluster.profiles.items()}
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
    if cluster.proxy.enabled:
        for host in registry.no_proxy_hosts(cfg):
            if host not in cluster.proxy.no_proxy:
                problems.append(f"the internal mirror {host} is not in NO_PROXY")
        checked.append("internal mirrors in NO_PROXY")
    return checked, problems
