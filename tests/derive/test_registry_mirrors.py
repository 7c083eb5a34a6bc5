"""cluster.yml `registry.mirrors` through the real CLI: a config with mirrors passes the real
`invoke validate`, a bad mirror is refused naming its key and line before anything is written, and
what the mirrors become (hosts.toml, kubeadm's image repository, NO_PROXY, Docker's registry-mirrors,
the credentials) is decided once in k4w.derive.registry. The pull itself: tests/bake/ubuntu/test_registry_mirror_real_containerd.py."""

from __future__ import annotations

import copy
import dataclasses
import re
import subprocess
from types import MappingProxyType

import pytest
import yaml

from k4w.model import config, profiles
from k4w.derive import images, step_env as derive_steps, registry
from k4w.derive.cluster import Cluster
from k4w.model.profiles import Attr
from k4w.validate import registry_rules
from tests.helpers import ROOT, invoke, write_config

MODERN = yaml.safe_load((ROOT / "examples" / "cluster-modern.yml").read_text())
SEED = yaml.safe_load((ROOT / "cluster.yml").read_text())


@pytest.fixture
def corp_ca(tmp_path):
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(tmp_path / "ca.key"),
                    "-out", str(tmp_path / "corp-ca.pem"), "-days", "2", "-subj", "/CN=corp CA"], check=True, capture_output=True)
    return tmp_path / "corp-ca.pem"


def with_kube(cluster: Cluster, box: str, **values) -> Cluster:
    """The cluster with one box's kubernetes values changed, on a copy: profiles.load's are shared."""
    data = Attr.wrap(copy.deepcopy(dict(cluster.profile(box).data)))
    data["kubernetes"].update(values)
    changed = dataclasses.replace(cluster.profile(box), data=data)
    return dataclasses.replace(cluster, profiles=MappingProxyType({**cluster.profiles, box: changed}))


def mirrors_config(folder, mirrors: dict, base: dict = MODERN, proxy: bool = True):
    data = yaml.safe_load(yaml.safe_dump(base))
    if proxy:
        data["proxy"] = {"http": "http://proxy.corp.example:3128", "https": "http://proxy.corp.example:3128", "no_proxy": []}
    data["registry"] = {"mirrors": mirrors}
    return write_config(folder / "cluster.yml", data)


# The four registries of the brief: a Harbor with projects (a path, shared credentials), an IP mirror,
# and a lab registry without TLS.
GOOD = {
    "registry.k8s.io": {"endpoint": "https://puller:s3cr%40t@harbor.internal/k8s-proxy", "ca": "corp-ca.pem"},
    "docker.io": {"endpoint": "https://puller:s3cr%40t@harbor.internal/dockerhub-proxy", "ca": "corp-ca.pem"},
    "mcr.microsoft.com": {"endpoint": "https://10.20.0.5:5000", "ca": "corp-ca.pem"},
    "ghcr.io": {"endpoint": "http://registry-lab:5000", "plain_http": True},
}


@pytest.mark.tools
def test_a_config_with_mirrors_passes_the_real_validate_and_nothing_under_out_holds_the_password(tmp_path, corp_ca):
    cfg = mirrors_config(tmp_path, GOOD)
    out = tmp_path / "out"
    result = invoke("validate", "--config", str(cfg), "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "registry mirrors" in result.stdout
    assert "✓ containerd config versions" in result.stdout  # the credentials drop-in among them
    # containerd boxes keep kubeadm's upstream repository: hosts.toml sends its pulls to the mirror.
    assert (out / "kubeadm" / "kubeadm-config.yaml").read_text().count('imageRepository: "registry.k8s.io"') == 1
    for path in out.rglob("*"):
        if path.is_file():
            assert b"s3cr" not in path.read_bytes(), path


@pytest.mark.parametrize("mirror, message", [
    ({"endpoint": "http://harbor.internal"}, "endpoint is http://: use https://, or set plain_http: true"),
    ({"endpoint": "https://harbor.internal", "plain_http": True}, "plain_http: true needs an http:// endpoint"),
    ({"endpoint": "http://u:p@lab:5000", "plain_http": True}, "credentials over plain HTTP would cross the network readable"),
    ({"endpoint": "https://harbor.internal/v2/k8s"}, "without the registry API's /v2"),
    ({"endpoint": "https://harbor.internal?x=1"}, "must be an https:// URL of the mirror"),
    ({"endpoint": "https://harbor.internal", "ca": "missing.pem"}, "does not exist (a relative path is taken from the folder of the config file)"),
    ({"endpoint": "https://harbor.internal", "ca": "cluster.yml"}, "must hold PEM certificates"),
    ({"endpoint": "https://harbor.internal", "insecure": True}, "unknown key"),
    ({"endpoint": "https://puller@harbor.internal"}, "credentials must be user:password@ (both)"),
])
def test_a_bad_mirror_is_refused_by_validate_naming_its_key_and_line(tmp_path, mirror, message):
    cfg = mirrors_config(tmp_path, {"registry.k8s.io": mirror})
    out = tmp_path / "out"
    result = invoke("validate", "--config", str(cfg), "--out", str(out))
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "registry.mirrors.registry.k8s.io" in result.stderr and message in result.stderr, result.stderr
    assert "line " in result.stderr
    assert not out.exists()  # refused before --out is created


def test_an_upstream_that_is_no_registry_host_and_a_shared_host_with_other_credentials_are_refused(tmp_path):
    cfg = mirrors_config(tmp_path, {"Docker_Hub": {"endpoint": "https://harbor.internal"}})
    result = invoke("render", "--config", str(cfg), "--out", str(tmp_path / "out"))
    assert result.returncode != 0 and "'Docker_Hub': each key is an upstream registry host" in result.stderr
    cfg = mirrors_config(tmp_path, {"registry.k8s.io": {"endpoint": "https://a:b@harbor.internal/k8s"},
                                    "docker.io": {"endpoint": "https://harbor.internal/hub"}})
    result = invoke("render", "--config", str(cfg), "--out", str(tmp_path / "out"))
    assert result.returncode != 0
    assert "its mirror host harbor.internal is also" in result.stderr and "one host has one of each" in result.stderr


@pytest.mark.parametrize("mirror, message", [
    ({"ghcr.io": {"endpoint": "https://mirror.corp.example"}}, "runs Docker, which mirrors docker.io only"),
    ({"docker.io": {"endpoint": "https://mirror.corp.example/hub"}}, "registry-mirrors takes a mirror host without a path"),
    ({"docker.io": {"endpoint": "https://u:p@mirror.corp.example"}}, "for which k4w writes no certs.d CA"),
])
def test_the_seed_era_refuses_what_docker_cannot_mirror(tmp_path, mirror, message):
    cfg = mirrors_config(tmp_path, mirror, base=SEED, proxy=False)
    result = invoke("render", "--config", str(cfg), "--out", str(tmp_path / "out"))
    assert result.returncode != 0 and message in result.stderr, result.stderr
    assert "box ubuntu-1604" in result.stderr and "box windows-1803" in result.stderr


def test_a_docker_box_that_loads_its_images_from_the_host_may_name_any_mirror_but_docker_hubs_rules_stay(tmp_path, corp_ca):
    """downloads.images: cache: k4w on the host pulls through the mirrors (their CA, their credentials), the
    Ubuntu box's Docker loads every image and never asks them; windows-1803 still pulls, so it is refused."""
    data = yaml.safe_load(yaml.safe_dump(SEED))
    data["downloads"] = {**(data.get("downloads") or {}), "images": "cache"}
    mirrors = {"registry.k8s.io": {"endpoint": "https://u:p@k8s-mirror.corp.example", "ca": str(corp_ca)},
               "quay.io": {"endpoint": "https://quay-mirror.corp.example", "ca": str(corp_ca)}}
    linux_only = {**data, "nodes": [n for n in data["nodes"] if n["box"] != "windows-1803"]}
    cfg = mirrors_config(tmp_path, mirrors, base=linux_only, proxy=False)
    result = invoke("render", "--config", str(cfg), "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    both = mirrors_config(tmp_path, mirrors, base=data, proxy=False)
    result = invoke("render", "--config", str(both), "--out", str(tmp_path / "out"))
    assert result.returncode != 0 and "box windows-1803" in result.stderr and "box ubuntu-1604" not in result.stderr
    hub = mirrors_config(tmp_path, {"docker.io": {"endpoint": "https://u:p@mirror.corp.example"}}, base=linux_only, proxy=False)
    result = invoke("render", "--config", str(hub), "--out", str(tmp_path / "out"))
    assert result.returncode != 0 and "box ubuntu-1604 runs Docker, for which k4w writes no certs.d CA" in result.stderr


def test_the_seed_era_gets_docker_hubs_mirror_in_daemon_json_and_kubeadms_images_from_the_k8s_mirror(tmp_path):
    cfg = config.load(mirrors_config(tmp_path, {"docker.io": {"endpoint": "https://hub-mirror.corp.example"},
                                                "registry.k8s.io": {"endpoint": "https://k8s-mirror.corp.example"}},
                                     base=SEED, proxy=False))
    cluster = Cluster.resolve(cfg)
    for box in ("ubuntu-1604", "windows-1803"):
        env = derive_steps.step_env(cluster.profile(box), cluster).env
        assert env["K4W_DOCKER_REGISTRY_MIRRORS"] == "https://hub-mirror.corp.example"
        assert env["K4W_REGISTRY_FILES"] == env["K4W_REGISTRY_AUTH"] == ""  # no containerd on this era
    assert cluster.kube.image_repository == "k8s-mirror.corp.example"
    assert cluster.kube.pause_image == "k8s-mirror.corp.example/pause:3.1"
    # windows-1803's pause image is on Docker Hub: daemon.json's mirror serves it, its name stays.
    assert cluster.profile("windows-1803").data.kubernetes.pause_image == "kubeletwin/pause:1803"


def test_containerd_gets_hosts_toml_per_upstream_the_ca_beside_it_and_the_credentials_apart(tmp_path, corp_ca):
    cfg = config.load(mirrors_config(tmp_path, GOOD))
    files = registry.certs_d(cfg)
    # One folder per upstream, none for a mirror host: no image on a containerd box names the mirror.
    assert sorted(files) == ["docker.io/ca.crt", "docker.io/hosts.toml", "ghcr.io/hosts.toml",
                             "mcr.microsoft.com/ca.crt", "mcr.microsoft.com/hosts.toml",
                             "registry.k8s.io/ca.crt", "registry.k8s.io/hosts.toml"]
    assert '[host."https://harbor.internal/v2/k8s-proxy"]' in files["registry.k8s.io/hosts.toml"]
    assert "override_path = true" in files["registry.k8s.io/hosts.toml"]
    assert '[host."http://registry-lab:5000"]' in files["ghcr.io/hosts.toml"]
    assert '[host."https://10.20.0.5:5000"]' in files["mcr.microsoft.com/hosts.toml"]
    assert not any("s3cr" in text for text in files.values())
    auth = registry.auth_toml(cfg)
    assert auth.count("[plugins.'io.containerd.cri.v1.images'.registry.configs.\"harbor.internal\".auth]") == 1
    assert 'password = "s3cr@t"' in auth  # percent-decoding undone for containerd
    # The internal mirrors go around the proxy; a name under a public-looking domain is the user's call.
    assert registry.no_proxy_hosts(cfg) == ["harbor.internal", "registry-lab", "10.20.0.5"]  # by upstream name
    env = derive_steps.step_env((resolved := Cluster.resolve(cfg)).profile("windows-2025"), resolved)
    assert env.env["K4W_REGISTRY_AUTH"] != "" and "registry_auth" in env.secrets
    assert "s3cr" not in " ".join(env.env.values())


def test_the_hosts_toml_check_fails_on_a_planted_defect(tmp_path, corp_ca):
    cfg = config.load(mirrors_config(tmp_path, GOOD))
    facts = registry_rules._facts("2.3.7")
    files = registry.certs_d(cfg)
    assert registry_rules.hosts_problems(files, facts) == []
    planted = dict(files)
    planted["registry.k8s.io/hosts.toml"] = files["registry.k8s.io/hosts.toml"].replace(
        'capabilities = ["pull", "resolve"]', 'capabilities = ["pull", "mirror"]\n  username = "x"')
    del planted["docker.io/ca.crt"]
    assert registry_rules.hosts_problems(planted, facts) == [
        'docker.io/hosts.toml: host https://harbor.internal/v2/dockerhub-proxy: ca ca.crt is not shipped beside it',
        "registry.k8s.io/hosts.toml: host https://harbor.internal/v2/k8s-proxy: username is not a hosts.toml key of containerd 2.3.7",
        "registry.k8s.io/hosts.toml: host https://harbor.internal/v2/k8s-proxy: capability 'mirror' is not one containerd 2.3.7 knows",
    ]


def test_the_credentials_check_has_the_real_containerd_read_the_drop_in_and_fails_on_a_planted_defect(tmp_path, corp_ca, monkeypatch):
    cfg = config.load(mirrors_config(tmp_path, GOOD))
    cluster = Cluster.resolve(cfg)
    checked, problems = registry_rules.check(cluster)
    assert problems == [] and "the credentials drop-in, by containerd 2.3.7 config dump" in checked
    # A drop-in under a table containerd does not read (registry.config, not configs): the file is
    # valid TOML, and containerd would silently pull without credentials.
    good = registry.auth_toml(cfg)
    monkeypatch.setattr(registry, "auth_toml", lambda _cfg: good.replace(".registry.configs.", ".registry.config."))
    _, problems = registry_rules.check(cluster)
    assert problems == ["containerd 2.3.7 reads no credentials for harbor.internal from the drop-in"]


def test_the_real_containerd_check_refuses_a_drop_in_it_would_migrate_at_every_start(tmp_path, corp_ca, monkeypatch):
    """Planted defect: the drop-in at config version 3. containerd 2.3.7 still reads its credentials
    (the tables are alike in 3 and 4), but migrates the file and logs a warning at every start."""
    cluster = Cluster.resolve(config.load(mirrors_config(tmp_path, GOOD)))
    good = registry.auth_toml(cluster.config)
    assert "\nversion = 4\n" in good
    monkeypatch.setattr(registry, "auth_toml", lambda _cfg: good.replace("\nversion = 4\n", "\nversion = 3\n"))
    _, problems = registry_rules.check(cluster)
    assert len(problems) == 1, problems
    assert problems[0].startswith("containerd 2.3.7 migrates the credentials drop-in at every start: ")
    assert "Configuration migrated from version 3" in problems[0]


def test_a_mirrored_pause_image_is_judged_by_the_upstream_manifest_list_it_serves(tmp_path, corp_ca):
    """The Windows-build rule (facts/windows-images.yml) knows upstream pause images. A containerd box
    keeps the upstream name; a name under the mirror (as a Docker box's) is judged as registry.k8s.io's."""
    from k4w.validate import windows_image_rules

    cluster = Cluster.resolve(config.load(mirrors_config(tmp_path, GOOD)))
    box = cluster.profile("windows-2025")
    assert box.data.kubernetes.pause_image == "registry.k8s.io/pause:3.10.2"
    assert windows_image_rules.check(cluster)[1] == []
    cluster = with_kube(cluster, "windows-2025", pause_image="harbor.internal/k8s-proxy/pause:3.10.2")
    box = cluster.profile("windows-2025")
    assert registry.upstream_image(box.data.kubernetes.pause_image, cluster.config) == "registry.k8s.io/pause:3.10.2"
    assert registry.upstream_image("mcr.microsoft.com/windows/servercore:ltsc2025", cluster.config) == \
        "mcr.microsoft.com/windows/servercore:ltsc2025"   # an image no mirror renamed keeps its name
    assert windows_image_rules.check(cluster)[1] == []
    # A pause release without a 26100 entry is still refused when it comes through the mirror.
    cluster = with_kube(cluster, "windows-2025", pause_image="harbor.internal/k8s-proxy/pause:3.10.1")
    problems = windows_image_rules.check(cluster)[1]
    assert len(problems) == 1 and "has no Windows 26100 entry in its manifest list" in problems[0], problems


# ---------------------------------------------------------------- every pull ends at a published name

MODERN_2022 = yaml.safe_load((ROOT / "examples" / "cluster-modern-2022.yml").read_text())
# The shapes a company's mirror takes: a Harbor proxy-cache project per upstream, ONE endpoint for
# several upstreams (a Nexus group or a Harbor group), an IPv6 mirror, and the four of GOOD.
CONTAINERD_SHAPES = {
    "harbor project": {"registry.k8s.io": {"endpoint": "https://harbor.internal/k8s-proxy"}},
    "one group endpoint": {upstream: {"endpoint": "https://nexus.internal:8443"}
                           for upstream in ("registry.k8s.io", "mcr.microsoft.com", "ghcr.io", "docker.io")},
    "ipv6 mirror": {"registry.k8s.io": {"endpoint": "https://[fd00:20::5]:5000", "ca": "corp-ca.pem"},
                    "mcr.microsoft.com": {"endpoint": "https://[fd00:20::5]:5000", "ca": "corp-ca.pem"}},
    "the four of GOOD": GOOD,
}
SEED_SHAPES = {
    "k8s and hub mirrors": {"registry.k8s.io": {"endpoint": "https://k8s-mirror.corp.example"},
                            "docker.io": {"endpoint": "https://hub-mirror.corp.example"}},
    "k8s under a prefix": {"registry.k8s.io": {"endpoint": "https://mirror.corp.example/k8s"}},
}


@pytest.mark.parametrize("base, shape", [(base, shape) for base in ("MODERN", "MODERN_2022") for shape in CONTAINERD_SHAPES]
                         + [("SEED", shape) for shape in SEED_SHAPES])
def test_every_image_of_every_mirror_shape_is_fetched_under_a_name_its_upstream_publishes(tmp_path, corp_ca, base, shape):
    """The class of the CoreDNS defect: kubeadm's, the boxes' and the manifests' images, mapped through
    the mirror to what a pull-through cache asks its upstream, are all published names; and the
    Windows-build rule judges the pause image as the upstream's (one endpoint for registry.k8s.io and
    mcr.microsoft.com once made it read mcr.microsoft.com/pause:3.10.2)."""
    from k4w.validate import windows_image_rules

    shapes = SEED_SHAPES if base == "SEED" else CONTAINERD_SHAPES
    cluster = Cluster.resolve(config.load(mirrors_config(tmp_path, shapes[shape], base=globals()[base], proxy=base != "SEED")))
    count, problems = registry_rules.image_problems(cluster, None)
    assert problems == [] and count >= 8
    assert windows_image_rules.check(cluster)[1] == []
    assert registry_rules.hosts_problems(registry.certs_d(cluster.config), registry_rules._facts("2.3.7")) == []
    for box, profile in cluster.profiles.items():
        if "containerd" in profile.data.components:  # containerd boxes keep the upstream names
            assert profile.data.kubernetes.pause_image.startswith("registry.k8s.io/"), box


def test_kubeadms_repository_under_the_mirror_is_refused_naming_coredns(tmp_path):
    """Planted: the old rewrite (kubeadm's imageRepository naming a registry.k8s.io mirror on a
    containerd box). kubeadm then asks for <mirror>/coredns:<tag>, which the mirror fetches as
    registry.k8s.io/coredns:<tag>: not published."""
    cluster = Cluster.resolve(config.load(mirrors_config(tmp_path, CONTAINERD_SHAPES["harbor project"])))
    cluster = with_kube(cluster, "ubuntu-2604", image_repository="harbor.internal/k8s-proxy")
    _, problems = registry_rules.image_problems(cluster, None)
    assert problems == ["harbor.internal/k8s-proxy/coredns:v1.14.6 (ubuntu-2604) is fetched by the registry.k8s.io mirror "
                        "as registry.k8s.io/coredns:v1.14.6, which its registry does not publish "
                        "(k4w/validate/facts/upstream-images.yml): the pull would fail"]


def test_a_name_under_a_mirror_prefix_that_several_upstreams_share_is_refused(tmp_path):
    """Seed era, one mirror host for Docker Hub and registry.k8s.io: kubeadm's images are named
    mirror.corp.example/<name>, and the mirror cannot tell which upstream that is."""
    cluster = Cluster.resolve(config.load(mirrors_config(tmp_path, {
        "registry.k8s.io": {"endpoint": "https://mirror.corp.example"}, "docker.io": {"endpoint": "https://mirror.corp.example"}},
        base=SEED, proxy=False)))
    _, problems = registry_rules.image_problems(cluster, None)
    assert "mirror.corp.example/coredns:1.1.3 (ubuntu-1604) names a mirror prefix that serves docker.io and registry.k8s.io" \
        in "\n".join(problems), problems
    assert len(problems) == 7  # kubeadm 1.11's seven images, each refused


def test_every_image_a_box_profile_pins_is_in_the_published_table():
    """The table stays complete: a box that pins a new image (or kubeadm version) must add it with its source."""
    known = registry_rules.published()
    for path in sorted((ROOT / "boxes").glob("*.yml")):
        profile = profiles.load(path.stem)
        missing = [image for image in images.box_images(profile) if registry_rules.canonical(image) not in known]
        assert missing == [], f"{path.name}: {missing}"


@pytest.mark.tools
@pytest.mark.parametrize("repository", ["registry.k8s.io", "harbor.internal/k8s-proxy"])
def test_the_kubeadm_image_model_is_what_the_pinned_kubeadm_lists(repository):
    """k4w's model of kubeadm's names (facts/upstream-images.yml) against the real kubeadm 1.37.2."""
    from k4w.infra import pinned_tools

    version = yaml.safe_load((ROOT / "boxes" / "ubuntu-2604.yml").read_text())["kubernetes"]["version"]
    kubeadm = pinned_tools.require("kubernetes-node", "kubeadm")
    res = subprocess.run([str(kubeadm), "config", "images", "list", "--kubernetes-version", f"v{version}",
                          "--image-repository", repository], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert sorted(res.stdout.split()) == sorted(images.kubeadm_images(version, repository))


# ---------------------------------------------------------------- config refusals and the plan

def test_a_ca_file_with_a_block_that_is_no_certificate_is_refused(tmp_path, corp_ca):
    good = corp_ca.read_text()
    for name, text, message in [
        ("junk.pem", "-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n",
         "PEM block 1 does not parse as an X.509 certificate"),
        ("second-junk.pem", good + "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
         "PEM block 2 does not parse as an X.509 certificate"),
        ("unclosed.pem", good + "-----BEGIN CERTIFICATE-----\nMIIB\n", "a PEM block is not closed by its -----END line"),
    ]:
        (tmp_path / name).write_text(text)
        cfg = mirrors_config(tmp_path, {"registry.k8s.io": {"endpoint": "https://harbor.internal", "ca": name}})
        result = invoke("render", "--config", str(cfg), "--out", str(tmp_path / "out"))
        assert result.returncode != 0 and message in result.stderr, result.stderr
        assert "registry.mirrors.registry.k8s.io" in result.stderr
    # A bundle with comments between its blocks (as distributions ship them) is a good CA file.
    (tmp_path / "bundle.pem").write_text("# Issuer: CN=corp CA\n" + good + "\n# again\n" + good)
    config.load(mirrors_config(tmp_path, {"registry.k8s.io": {"endpoint": "https://harbor.internal", "ca": "bundle.pem"}}))


def test_an_upstream_key_with_a_port_out_of_range_is_refused(tmp_path):
    cfg = mirrors_config(tmp_path, {"registry.k8s.io:99999": {"endpoint": "https://harbor.internal"}})
    result = invoke("render", "--config", str(cfg), "--out", str(tmp_path / "out"))
    assert result.returncode != 0 and "'registry.k8s.io:99999': each key is an upstream registry host" in result.stderr
    assert "with a port only between 1 and 65535" in result.stderr
    config.load(mirrors_config(tmp_path, {"registry.corp.example:65535": {"endpoint": "https://harbor.internal"}}))


def test_a_certs_d_folder_windows_cannot_create_is_refused():
    """Planted: the folder containerd's hostDirectory gives an IPv6 mirror host ("[fd00::5]:5000" ->
    "[fd00::5]_5000_"); k4w writes none (no image names the mirror), the rule catches any."""
    files = {"[fd00::5]_5000_/hosts.toml": 'server = "https://[fd00::5]:5000"\n', "registry.k8s.io./hosts.toml": ""}
    problems = registry_rules.hosts_problems(files, registry_rules._facts("2.3.7"))
    assert [p.split(":")[0] for p in problems] == ["certs.d folder '[fd00", "certs.d folder 'registry.k8s.io.'"]
    assert all("Windows cannot create a folder of that name" in p for p in problems)


def test_plan_lists_each_upstream_and_its_mirror_without_credentials(tmp_path, corp_ca):
    mirrors = {**GOOD, "registry.k8s.i0": {"endpoint": "https://typo-mirror.internal"}}
    cfg = mirrors_config(tmp_path, mirrors)
    result = invoke("plan", "--config", str(cfg), "--out", str(tmp_path / "out"), "--dry-run")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = {line.split()[0]: line for line in result.stdout.splitlines() if line.split() and line.split()[0] in mirrors}
    assert "https://***@harbor.internal/k8s-proxy" in lines["registry.k8s.io"] and "CA corp-ca.pem" in lines["registry.k8s.io"]
    assert "ubuntu-2604" in lines["registry.k8s.io"] and "windows-2025" in lines["registry.k8s.io"]
    assert "http://registry-lab:5000" in lines["ghcr.io"] and "plain HTTP" in lines["ghcr.io"]
    assert "none of this cluster's boxes (a misspelled upstream?)" in lines["registry.k8s.i0"]
    assert "s3cr" not in result.stdout + result.stderr


# An image reference in prose: [registry/][path/]name:tag, the tag starting with a digit or v<digit>.
_DOC_IMAGE = re.compile(r"(?<![\w./:-])((?:[a-z0-9.-]+(?::\d+)?/)?(?:[a-z0-9._-]+/)*[a-z0-9._-]+):(v?\d[\w.-]*\w)")


def mirror_docs() -> dict[str, str]:
    # The README's "Registry mirrors" section is now the first part of docs/registry-mirrors.md (issue 34);
    # each part must still show the examples it checks.
    page = (ROOT / "docs" / "registry-mirrors.md").read_text(encoding="utf-8")
    split = page.index("\n## Checking what your mirror will be asked for")
    return {"docs/registry-mirrors.md (cluster.yml's registry.mirrors)": page[:split],
            "docs/registry-mirrors.md (checking a mirror)": page[split:]}


def test_every_image_tag_the_mirror_docs_name_is_one_a_profile_pins():
    """The docs' examples follow the profiles: a tag next to an image name the profiles pull (by the
    name's last path element, so a mirror-prefixed example counts) must be a tag they pin."""
    pinned: dict[str, set[str]] = {}
    for path in (ROOT / "boxes").glob("*.yml"):
        for image in images.box_images(profiles.load(path.stem)):
            repository, _, tag = image.split("@", 1)[0].rpartition(":")
            pinned.setdefault(repository.rsplit("/", 1)[-1], set()).add(tag)
    for where, text in mirror_docs().items():
        found = [(m[0], m[1], m[2]) for m in _DOC_IMAGE.finditer(text) if m[1].rsplit("/", 1)[-1] in pinned]
        assert len(found) >= 2, f"{where}: the test no longer finds the examples it checks"
        wrong = [reference for reference, repository, tag in found if tag not in pinned[repository.rsplit("/", 1)[-1]]]
        assert wrong == [], f"{where} names tags no box profile pins: {wrong}"


def test_the_plan_counts_a_seed_box_whose_names_k4w_put_under_the_mirror_as_the_upstreams(tmp_path):
    cluster = Cluster.resolve(config.load(mirrors_config(tmp_path, SEED_SHAPES["k8s and hub mirrors"], base=SEED, proxy=False)))
    assert registry.plan_rows(cluster.config, dict(cluster.profiles)) == [
        ["docker.io", "https://hub-mirror.corp.example", "system CAs", "windows-1803"],
        ["registry.k8s.io", "https://k8s-mirror.corp.example", "system CAs", "ubuntu-1604"]]
