"""cluster.yml `registry.mirrors` through the real CLI: a config with mirrors passes the real
`invoke validate`, a bad mirror is refused naming its key and line before anything is written, and
what the mirrors become (hosts.toml, kubeadm's image repository, NO_PROXY, Docker's registry-mirrors,
the credentials) is decided once in k4w.registry. The pull itself: tests/bake/ubuntu/test_registry_mirror_real_containerd.py."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from k4w import config, derive_steps, registry
from k4w.cluster_model import Cluster
from k4w.validate import registry_rules
from tests.helpers import ROOT, invoke, write_config

MODERN = yaml.safe_load((ROOT / "examples" / "cluster-modern.yml").read_text())
SEED = yaml.safe_load((ROOT / "cluster.yml").read_text())


@pytest.fixture
def corp_ca(tmp_path):
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(tmp_path / "ca.key"),
                    "-out", str(tmp_path / "corp-ca.pem"), "-days", "2", "-subj", "/CN=corp CA"], check=True, capture_output=True)
    return tmp_path / "corp-ca.pem"


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
    assert (out / "kubeadm" / "kubeadm-config.yaml").read_text().count('imageRepository: "harbor.internal/k8s-proxy"') == 1
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


def test_the_seed_era_gets_docker_hubs_mirror_in_daemon_json_and_kubeadms_images_from_the_k8s_mirror(tmp_path):
    cfg = config.load(mirrors_config(tmp_path, {"docker.io": {"endpoint": "https://hub-mirror.corp.example"},
                                                "registry.k8s.io": {"endpoint": "https://k8s-mirror.corp.example"}},
                                     base=SEED, proxy=False))
    cluster = Cluster.resolve(cfg)
    for box in ("ubuntu-1604", "windows-1803"):
        env = derive_steps.step_env(cluster.profile(box), cfg).env
        assert env["K4W_DOCKER_REGISTRY_MIRRORS"] == "https://hub-mirror.corp.example"
        assert env["K4W_REGISTRY_FILES"] == env["K4W_REGISTRY_AUTH"] == ""  # no containerd on this era
    assert cluster.kube.image_repository == "k8s-mirror.corp.example"
    assert cluster.kube.pause_image == "k8s-mirror.corp.example/pause:3.1"
    # windows-1803's pause image is on Docker Hub: daemon.json's mirror serves it, its name stays.
    assert cluster.profile("windows-1803").data.kubernetes.pause_image == "kubeletwin/pause:1803"


def test_containerd_gets_hosts_toml_per_upstream_the_ca_beside_it_and_the_credentials_apart(tmp_path, corp_ca):
    cfg = config.load(mirrors_config(tmp_path, GOOD))
    files = registry.certs_d(cfg)
    assert sorted(files) == ["10.20.0.5_5000_/ca.crt", "10.20.0.5_5000_/hosts.toml", "docker.io/ca.crt", "docker.io/hosts.toml",
                             "ghcr.io/hosts.toml", "harbor.internal/ca.crt", "harbor.internal/hosts.toml",
                             "mcr.microsoft.com/ca.crt", "mcr.microsoft.com/hosts.toml", "registry-lab_5000_/hosts.toml",
                             "registry.k8s.io/ca.crt", "registry.k8s.io/hosts.toml"]
    assert '[host."https://harbor.internal/v2/k8s-proxy"]' in files["registry.k8s.io/hosts.toml"]
    assert "override_path = true" in files["registry.k8s.io/hosts.toml"]
    assert 'server = "http://registry-lab:5000"' in files["registry-lab_5000_/hosts.toml"]
    assert not any("s3cr" in text for text in files.values())
    auth = registry.auth_toml(cfg)
    assert auth.count("[plugins.'io.containerd.cri.v1.images'.registry.configs.\"harbor.internal\".auth]") == 1
    assert 'password = "s3cr@t"' in auth  # percent-decoding undone for containerd
    # The internal mirrors go around the proxy; a name under a public-looking domain is the user's call.
    assert registry.no_proxy_hosts(cfg) == ["harbor.internal", "registry-lab", "10.20.0.5"]  # by upstream name
    env = derive_steps.step_env(Cluster.resolve(cfg).profile("windows-2025"), cfg)
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
    """The Windows-build rule (facts/windows-images.yml) knows upstream pause images; under a mirror the
    profile names harbor.internal/k8s-proxy/pause:<tag>, which must be judged as registry.k8s.io's."""
    from k4w.validate import windows_image_rules

    cluster = Cluster.resolve(config.load(mirrors_config(tmp_path, GOOD)))
    box = cluster.profile("windows-2025")
    assert box.data.kubernetes.pause_image == "harbor.internal/k8s-proxy/pause:3.10.2"
    assert registry.upstream_image(box.data.kubernetes.pause_image, cluster.config) == "registry.k8s.io/pause:3.10.2"
    assert registry.upstream_image("mcr.microsoft.com/windows/servercore:ltsc2025", cluster.config) == \
        "mcr.microsoft.com/windows/servercore:ltsc2025"   # an image no mirror renamed keeps its name
    assert windows_image_rules.check(cluster)[1] == []
    # A pause release without a 26100 entry is still refused when it comes through the mirror.
    box.data.kubernetes["pause_image"] = "harbor.internal/k8s-proxy/pause:3.10.1"
    problems = windows_image_rules.check(cluster)[1]
    assert len(problems) == 1 and "has no Windows 26100 entry in its manifest list" in problems[0], problems
