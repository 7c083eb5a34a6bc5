"""cluster-up gives flanneld and kube-proxy on a Windows node kubeconfigs of their own
ServiceAccounts (k4w/derive/identities.py), as private files, before the join starts those services."""

from __future__ import annotations

import base64

import pytest
import yaml

from k4w.infra.errors import K4wError
from tests.cluster.conftest import run_up
from tests.fakes import cluster_answers

CONF = {"flanneld": ("C:\\k4w\\flanneld.conf", "C:\\etc\\kubernetes\\flanneld.conf", "k4w-windows-flanneld"),
        "kube-proxy": ("C:\\k4w\\kube-proxy.conf", "C:\\etc\\kubernetes\\kube-proxy.conf", "k4w-windows-kube-proxy")}


def _line(log, pattern: str) -> int:
    return next(i for i, line in enumerate(log) if pattern in line)


@pytest.mark.parametrize("component", sorted(CONF))
def test_each_component_gets_a_private_kubeconfig_of_its_service_account(world, component):
    run_up(world)
    uploaded, destination, account = CONF[component]
    text, mode = world.uploaded[uploaded]
    assert mode == 0o600
    conf = yaml.safe_load(text)
    assert conf["users"] == [{"name": account, "user": {"token": cluster_answers.SERVICE_ACCOUNT_TOKEN}}]
    cluster = conf["clusters"][0]["cluster"]
    assert cluster["server"] == "https://192.168.250.10:6443"   # the API server of the join
    assert base64.b64decode(cluster["certificate-authority-data"]).decode() == cluster_answers.CLUSTER_CA
    assert conf["contexts"][0]["context"] == {"cluster": "k4w", "user": account}
    # read from its own token Secret, moved into place before the join script starts the services
    log = world.log
    secret = _line(log, f"master: kubectl -n kube-system get secret {account}-token -o json")
    moved = _line(log, f"worker-win: & 'C:\\k4w\\cluster-kubeconfig.ps1' -Source '{uploaded}' -Destination '{destination}'")
    joined = _line(log, "worker-win: & 'C:\\k4w\\cluster-join.ps1'")
    assert secret < moved < joined


def test_the_token_never_appears_on_a_command_line(world):
    run_up(world)
    assert not [line for line in world.log if cluster_answers.SERVICE_ACCOUNT_TOKEN in line]


def test_a_token_the_controller_has_not_filled_yet_is_waited_for(world):
    world.scenario["tokens_pending"] = 3
    run_up(world)
    asked = [line for line in world.log if "get secret k4w-windows-flanneld-token" in line]
    assert len(asked) == 4
    assert yaml.safe_load(world.uploaded[CONF["flanneld"][0]][0])["users"][0]["user"]["token"] == cluster_answers.SERVICE_ACCOUNT_TOKEN


def test_a_token_that_never_comes_stops_the_join_and_names_the_secret(world):
    world.scenario["tokens_pending"] = 10_000
    with pytest.raises(K4wError, match="service account k4w-windows-flanneld.*kube-system/k4w-windows-flanneld-token has no token yet"):
        run_up(world)
    assert not [line for line in world.log if "cluster-join.ps1' -ApiServer" in line]
