"""Property: for any valid cluster.yml, every artifact agrees on the shared network values.

The top complaint in this field is a pod CIDR that differs between the master and the
Windows node. Here hypothesis generates configs and we read each value back out of each
rendered artifact, the way its consumer would parse it.
"""

import ipaddress
import json
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from k4w.model import config
from k4w.infra import packer_hcl
from k4w import render
from k4w.infra import packer_cli
from k4w.derive.cluster import Cluster
from k4w.derive.step_env import step_env
from k4w.infra.errors import K4wError
from tests.helpers import ROOT, config_dict, modern_config, use_sources

OUT = Path("/tmp/k4w-property-out")  # never written: render_files renders in memory


def _subnet(first_octets: st.SearchStrategy, prefix: st.SearchStrategy) -> st.SearchStrategy:
    return st.builds(
        lambda base, plen: ipaddress.IPv4Network(f"{base}/{plen}", strict=False),
        first_octets, prefix,
    )


octet = st.integers(0, 255)
private_base = st.one_of(
    st.builds(lambda b, c: f"10.{b}.{c}.0", octet, octet),
    st.builds(lambda b, c: f"172.{b}.{c}.0", st.integers(16, 31), octet),
    st.builds(lambda c: f"192.168.{c}.0", octet),
)


@st.composite
def configs(draw):
    node_net = draw(_subnet(private_base, st.integers(22, 28)))
    pod_net = draw(_subnet(private_base, st.integers(14, 20)))
    svc_net = draw(_subnet(private_base, st.integers(12, 24)))
    nets = [node_net, pod_net, svc_net]
    assume(all(not a.overlaps(b) for i, a in enumerate(nets) for b in nets[i + 1:]))
    hosts = list(node_net.hosts())[1:]  # the first host is the host's gateway
    n_linux = draw(st.integers(0, 2))
    n_windows = draw(st.integers(0, 2))
    ips = draw(st.lists(st.sampled_from(hosts), min_size=1 + n_linux + n_windows,
                        max_size=1 + n_linux + n_windows, unique=True))
    nodes = [{"name": "master", "role": "master", "box": "ubuntu-1604", "ip": str(ips[0]), "memory": 2048}]
    nodes += [{"name": f"lin{i}", "role": "worker", "box": "ubuntu-1604", "ip": str(ips[1 + i]), "memory": 2048}
              for i in range(n_linux)]
    nodes += [{"name": f"win{i}", "role": "worker", "box": "windows-1803", "ip": str(ips[1 + n_linux + i]), "memory": 4096}
              for i in range(n_windows)]
    backend = "host-gw" if n_windows else draw(st.sampled_from(["host-gw", "vxlan"]))
    proxy_host = draw(st.sampled_from(["proxy.corp.example", "10.1.2.3"]))
    proxy = draw(st.sampled_from([
        {}, {"http": f"http://{proxy_host}:3128"}, {"http": f"http://{proxy_host}:3128", "https": f"http://{proxy_host}:3129"},
    ]))
    data = {
        "proxy": proxy,
        "network": {"node_cidr": str(node_net), "pod_cidr": str(pod_net), "service_cidr": str(svc_net), "backend": backend},
        "nodes": nodes,
    }
    return config.parse(yaml.safe_dump(data, sort_keys=False))


def _args(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def _env(template: dict, environ: dict[str, str]) -> dict[str, str]:
    """The environment every provisioner of a rendered Packer template passes to the guest,
    with the ${var.x} references filled in as Packer does, the variables' env() defaults from
    environ (the build runner's secret environment)."""
    env: dict[str, str] = {}
    variables = packer_cli.variable_values(template, environ)
    for prov in template["provisioners"]:
        for item in prov.get("environment_vars", []):
            key, _, value = packer_hcl.resolve(item, variables).partition("=")
            env[key] = value
    return env


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(configs())
def test_every_artifact_agrees_on_cidrs_dns_and_node_ips(cfg):
    cluster = Cluster.resolve(cfg)
    net = cluster.network
    files = render.render_files(cluster, OUT)
    pod, svc, dns = str(cfg.network.pod_cidr), str(cfg.network.service_cidr), net.dns_ip

    # kubeadm on the master
    kubeadm = yaml.safe_load(files["kubeadm/kubeadm-config.yaml"])
    assert kubeadm["networking"]["podSubnet"] == pod
    assert kubeadm["networking"]["serviceSubnet"] == svc
    assert kubeadm["kubeProxy"]["config"]["clusterCIDR"] == pod
    assert kubeadm["kubeletConfiguration"]["baseConfig"]["clusterDNS"] == [dns]
    assert kubeadm["api"]["advertiseAddress"] == str(cfg.master.ip)
    assert kubeadm["nodeRegistration"]["kubeletExtraArgs"]["node-ip"] == str(cfg.master.ip)

    # Flannel on the Linux nodes
    flannel_cm = next(d for d in yaml.safe_load_all(files["manifests/kube-flannel.yaml"]) if d and d["kind"] == "ConfigMap")
    assert json.loads(flannel_cm["data"]["net-conf.json"]) == net.flannel_netconf

    # The Windows nodes: Flannel, CNI, kubelet, kube-proxy
    for node in cfg.nodes:
        if node.box != "windows-1803":
            continue
        base = f"nodes/{node.name}/"
        assert json.loads(files[base + "net-conf.json"])["Network"] == pod
        cni = json.loads(files[base + "cni.conf"])["delegate"]
        assert cni["dns"]["Nameservers"] == [dns]
        policies = [p["value"] for p in cni["policies"]]
        assert any(p["Type"] == "OutBoundNAT" and pod in p["ExceptionList"] and svc in p["ExceptionList"] for p in policies)
        assert any(p["Type"] == "ROUTE" and p["DestinationPrefix"] == svc for p in policies)
        kubelet = _args(files[base + "kubelet.args"])
        assert kubelet["--cluster-dns"] == dns and kubelet["--node-ip"] == str(node.ip)
        assert _args(files[base + "kube-proxy.args"])["--cluster-cidr"] == pod
        assert _args(files[base + "flanneld.args"])["--iface"] == str(node.ip)

    # The cluster Vagrantfile's data
    machines = json.loads(files["vagrant/cluster.json"])["machines"]
    assert {m["name"]: m["ip"] for m in machines} == {n.name: str(n.ip) for n in cfg.nodes}

    # NO_PROXY in every box build (the NAME=value pairs the guest writes) carries the pod,
    # service and node CIDRs
    for box in cfg.boxes():
        env = _env(packer_hcl.parse(files[packer_hcl.rel_path(box)]), step_env(cluster.profile(box), cluster).secret_environment)
        pairs = dict(pair.split("=", 1) for pair in env["K4W_PROXY_ENV"].split())
        no_proxy = pairs.get("NO_PROXY", "").split(",")
        if cfg.proxy.http or cfg.proxy.https:
            for cidr in (pod, svc, str(cfg.network.node_cidr)):
                assert cidr in no_proxy, f"{box}: {cidr} missing from NO_PROXY"
            assert all(str(n.ip) in no_proxy for n in cfg.nodes)
        else:
            assert no_proxy == [""]


# ------------------------------------------------------------------ the Windows demo's image


def _demo_image(files: dict[str, str]) -> str:
    [deployment] = [d for d in yaml.safe_load_all(files["manifests/demo-win-webserver.yaml"]) if d and d["kind"] == "Deployment"]
    return deployment["spec"]["template"]["spec"]["containers"][0]["image"]


def test_the_demo_runs_the_server_core_image_of_the_windows_nodes_box(tmp_path):
    # A process-isolated container needs the host's build: 1803 for windows-1803, ltsc2022 for windows-2022.
    seed = render.render_files(Cluster.resolve(config.parse(yaml.safe_dump(config_dict()))), tmp_path / "seed")
    assert _demo_image(seed) == "mcr.microsoft.com/windows/servercore:1803"
    modern = render.render_files(Cluster.resolve(config.parse(yaml.safe_dump(modern_config()))), tmp_path / "modern")
    assert _demo_image(modern) == "mcr.microsoft.com/windows/servercore:ltsc2022"


def test_windows_nodes_on_boxes_with_different_images_are_refused_naming_both(tmp_path, monkeypatch):
    # Today no two Windows boxes share a backend (1803: host-gw only, 2022: vxlan only), so a
    # third-era box is made here: windows-2022 with another Server Core image.
    boxes = tmp_path / "boxes"
    boxes.mkdir()
    profile = yaml.safe_load((ROOT / "boxes" / "windows-2022.yml").read_text())
    profile["name"] = "windows-next"
    profile["images"]["servercore"] = "mcr.microsoft.com/windows/servercore:ltsc2025"
    (boxes / "windows-next.yml").write_text(yaml.safe_dump(profile, sort_keys=False))
    use_sources(monkeypatch, box_folders=(boxes, ROOT / "boxes"))
    data = modern_config()
    data["nodes"].append(dict(data["nodes"][2], name="worker-win-next", box="windows-next", ip="192.168.250.22"))
    with pytest.raises(K4wError) as refused:
        render.render_files(Cluster.resolve(config.parse(yaml.safe_dump(data))), tmp_path / "out")
    message = str(refused.value)
    assert "servercore:ltsc2022 on worker-win" in message and "servercore:ltsc2025 on worker-win-next" in message
    assert "give every Windows node the same box" in message
