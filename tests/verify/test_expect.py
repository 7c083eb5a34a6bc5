"""What the specs expect, derived from the box profiles: components, versions, keys, environment."""

from __future__ import annotations

import glob
from pathlib import Path

import pytest

from k4w.model import profiles
from k4w.infra.errors import K4wError
from k4w.verify import expect

WINDOWS = profiles.load("windows-1803")


def test_release_document_is_the_profiles_components():
    doc = expect.release_document(WINDOWS)
    assert doc["box"] == "windows-1803"
    assert doc["components"] == {name: str(spec["version"]) for name, spec in WINDOWS.data.components.items()}
    assert doc["components"]["docker"] == WINDOWS.data.components.docker.version


@pytest.mark.parametrize("name", profiles.available())
def test_kubernetes_components_agree_with_kubernetes_version(name):
    # The specs compare every Kubernetes binary with kubernetes.version; a profile whose
    # download components pin another version would build a box no spec can pass.
    data = profiles.load(name).data
    pinned = {c: str(spec["version"]) for c, spec in (data.get("components") or {}).items()
              if c in ("kubernetes", "kubeadm", "kubelet", "kubectl")}
    assert set(pinned.values()) <= {str(data.kubernetes.version)}, pinned


def test_missing_component_is_named():
    with pytest.raises(K4wError, match=r"components\.docker\.cgroup_driver is not set"):
        expect.component(WINDOWS, "docker", "cgroup_driver")


@pytest.mark.parametrize("actual, pinned, ok", [
    ("17.09.0-ce", "17.09.0-ce", True),
    ("17.03.2-ce", "17.03.2", True),
    ("17.06.2-ee-16", "17.06.2", True),
    ("17.03.20", "17.03.2", False),
    ("17.03.1-ce", "17.03.2", False),
    ("v1.11.10", "1.11.10", True),
])
def test_version_matches(actual, pinned, ok):
    assert expect.version_matches(actual, pinned) is ok


@pytest.mark.parametrize("output, version", [
    ("Kubernetes v1.11.10", "1.11.10"),
    ("v1.11.10\n", "1.11.10"),
    ('Client Version: version.Info{Major:"1", Minor:"11", GitVersion:"v1.11.10", GoVersion:"go1.10.8"}', "1.11.10"),
    ("I1121 flanneld.go:1] v0.11.0", "0.11.0"),
    ("command not found", None),
])
def test_reported_version(output, version):
    assert expect.reported_version(output) == version


def test_insecure_key_is_the_one_vagrant_ships():
    shipped = glob.glob("/usr/share/rubygems-integration/all/gems/vagrant-*/keys/vagrant.pub") + glob.glob(
        "/opt/vagrant/embedded/gems/gems/vagrant-*/keys/vagrant.pub")
    if not shipped:
        pytest.fail("Vagrant is not installed (its keys/vagrant.pub is the reference): apt-get install -y vagrant")
    assert expect.authorized_keys_have(Path(shipped[0]).read_text())
    assert expect.authorized_keys_have('no-pty ' + expect.VAGRANT_INSECURE_KEY + " vagrant insecure public key\n")
    assert not expect.authorized_keys_have("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK vagrant\n")


def test_env_assignments_as_systemd_and_etc_environment_write_them():
    text = 'PATH="/usr/bin"\nHTTP_PROXY="http://p:3128"\n# comment\nno_proxy=localhost,10.96.0.0/12\n'
    assert expect.parse_env_assignments(text) == {"PATH": "/usr/bin", "HTTP_PROXY": "http://p:3128", "no_proxy": "localhost,10.96.0.0/12"}
