"""The config model and the values derived from it."""

import ipaddress

import pytest

from k4w.model import config
from k4w.infra.errors import ConfigError
from k4w.derive.values import derive_network, derive_proxy
from tests.helpers import config_dict

import yaml


def parse(data: dict) -> config.Config:
    return config.parse(yaml.safe_dump(data, sort_keys=False))


def test_default_cluster_yml_is_the_documented_cluster():
    cfg = config.load(config.Path(__file__).parents[2] / "cluster.yml")
    assert [(n.role, n.box) for n in cfg.nodes] == [
        ("master", "ubuntu-1604"), ("worker", "ubuntu-1604"), ("worker", "windows-1803")]
    assert str(cfg.network.pod_cidr) == "10.244.0.0/16"
    assert str(cfg.network.service_cidr) == "10.96.0.0/12"
    assert cfg.network.backend == "host-gw"
    assert cfg.proxy.http is None and cfg.proxy.https is None


def test_every_key_of_the_default_config_is_commented():
    """Every key carries a comment; node fields are explained once, on the first node."""
    text = (config.Path(__file__).parents[2] / "cluster.yml").read_text()
    nodes_seen = 0
    for lineno, line in enumerate(text.splitlines(), 1):
        code = line.split("#")[0].strip()
        if not code or ":" not in code:
            continue
        nodes_seen += code.startswith("- name:")
        if nodes_seen > 1:
            continue
        assert "#" in line, f"cluster.yml line {lineno} ({code}) has no comment"


def test_dns_ip_is_tenth_address_of_service_cidr():
    cfg = parse(config_dict(**{"network.service_cidr": "10.32.0.0/16"}))
    assert derive_network(cfg).dns_ip == "10.32.0.10"
    assert derive_network(cfg).kubernetes_service_ip == "10.32.0.1"


def test_flannel_netconf_follows_backend():
    gw = derive_network(parse(config_dict()))
    assert gw.flannel_netconf == {"Network": "10.244.0.0/16", "Backend": {"Type": "host-gw"}}
    linux_only = config_dict(**{"network.backend": "vxlan"})
    linux_only["nodes"] = linux_only["nodes"][:2]
    vx = derive_network(parse(linux_only))
    assert vx.flannel_netconf["Backend"] == {"Type": "vxlan", "VNI": 4096, "Port": 4789}
    assert vx.windows_network_name == "vxlan0"


def test_no_proxy_lists_every_cidr_node_and_domain():
    data = config_dict(**{"proxy.http": "http://proxy.corp:3128", "proxy.no_proxy": [".corp.example"]})
    cfg = parse(data)
    no_proxy = derive_proxy(cfg).no_proxy
    for entry in ["localhost", "127.0.0.1", ".corp.example", "10.244.0.0/16", "10.96.0.0/12", "192.168.250.0/24",
                  "192.168.250.10", "192.168.250.21", "master", "worker-win", "cluster.local", ".svc"]:
        assert entry in no_proxy
    assert len(no_proxy) == len(set(no_proxy))


def test_https_proxy_is_never_copied_from_http():
    proxy = derive_proxy(parse(config_dict(**{"proxy.http": "http://proxy.corp:3128"})))
    assert proxy.http == "http://proxy.corp:3128"
    assert proxy.https is None
    assert "HTTPS_PROXY" not in proxy.env and "https_proxy" not in proxy.env
    assert proxy.env["HTTP_PROXY"] == proxy.env["http_proxy"] == "http://proxy.corp:3128"


def test_no_proxy_is_empty_without_a_proxy():
    proxy = derive_proxy(parse(config_dict()))
    assert not proxy.enabled and proxy.env == {}


@pytest.mark.parametrize("url", ["http://proxy:3128", "https://p.example.com:8443/", "http://user:p%40ss@10.0.0.1:8080"])
def test_valid_proxy_urls(url):
    assert parse(config_dict(**{"proxy.http": url})).proxy.http == url.rstrip("/")


def test_master_and_box_lists():
    cfg = parse(config_dict())
    assert cfg.master.name == "master"
    assert cfg.boxes() == ["ubuntu-1604", "windows-1803"]
    assert isinstance(cfg.nodes[0].ip, ipaddress.IPv4Address)


def test_errors_collect_every_problem_at_once():
    data = config_dict()
    data["nodes"][1]["ip"] = "10.9.9.9"
    data["nodes"][2]["memory"] = 512
    with pytest.raises(ConfigError) as exc:
        parse(data)
    assert len(exc.value.problems) == 2


@pytest.mark.parametrize("url", ["https://artifactory.corp.example/artifactory", "http://u:p%40ss@nexus:8081/repository/",
                                 "https://[fd00::1]/raw/k4w", "http://mirror"])
def test_valid_mirror_urls(url):
    assert parse(config_dict(**{"downloads.mirror": url})).downloads.mirror == url.rstrip("/")


@pytest.mark.parametrize("url", ["ftp://m/x", "https://m/x?y=1", "https://m/x#f", "https://m:99999/x", "https://m/a b",
                                 "https://u:p#1@m/x", "https://m/x\n"])
def test_invalid_mirror_urls(url):
    with pytest.raises(ConfigError, match="downloads.mirror"):
        parse(config_dict(**{"downloads.mirror": url}))


@pytest.mark.parametrize("provider", ["hyperv", "libvirt"])
def test_a_config_written_back_as_a_document_loads_to_the_same_config(tmp_path, provider):
    """cluster-test and test-box hand the spec process the validated config as a file (Config.document): it
    must load again on either provider, although the provider blocks' defaults are on the model (the first
    ubuntu-2604-e2e bake after host.provider met exactly this: `libvirt: host.provider is hyperv ... would be
    ignored`)."""
    source = tmp_path / "cluster.yml"
    source.write_text(f"host: {{provider: {provider}}}\n"
                      "nodes: [{name: master, role: master, box: ubuntu-2404, ip: 192.168.250.10, cpus: 2, memory: 2048}]\n",
                      encoding="utf-8")
    cfg = config.load(source)
    copy = tmp_path / "copy.yml"
    copy.write_text(yaml.safe_dump(cfg.document(), sort_keys=False), encoding="utf-8")
    assert config.load(copy) == cfg
    assert {"hyperv": "libvirt", "libvirt": "hyperv"}[provider] not in cfg.document()
