"""Step variables (docs/internals.md): every K4W_* name the guest scripts of a box read is produced
for that box by k4w/derive/step_env.py, every name produced is read, and each is spelt out in full at
both ends, so `grep -r K4W_FLANNEL_FILE` finds the producer and the reader."""

from __future__ import annotations

import re

import pytest
import yaml

from k4w.model import config, profiles
from k4w.derive import values as derive, step_env as derive_steps
from k4w.infra.errors import ConfigError, K4wError
from k4w.infra.sources import REPO_ROOT as ROOT
from k4w.derive.cluster import Cluster
from tests.helpers import config_dict, use_sources

GUEST = ROOT / "guest"
E2E_BOXES = ROOT / "ci" / "e2e" / "boxes"
# What a box build runs: each family's library and bake steps (and the Windows Setup bootstrap).
# The cluster scripts get their K4W_* values from cluster-up, not from the box build.
BUILD_SCRIPTS = {
    "ubuntu": [GUEST / "ubuntu" / "lib.sh", *sorted((GUEST / "ubuntu" / "bake").glob("*.sh"))],
    "windows": [GUEST / "windows" / "common.ps1", *sorted((GUEST / "windows" / "setup").glob("*.ps1")),
                *sorted((GUEST / "windows" / "bake").glob("*.ps1"))],
}
# Read by the Ubuntu scripts but never a step variable: the offline sandbox the unit tests run them in.
SANDBOX = {"K4W_ROOT"}
NAME = re.compile(r"\bK4W_[A-Z0-9_]*[A-Z0-9]\b")
# A global the script sets itself (K4W_STEP="01-proxy", declare -gA K4W_SYSCTLS=(...)), unlike
# K4W_LIB="${K4W_LIB:-...}", a default.
OWN_GLOBAL = re.compile(r"^\s*(?:local\s+|declare\s+(?:-[a-zA-Z]+\s+)*)?(K4W_[A-Z0-9_]+)=(?!\"\$\{\1:-)", re.M)

CREDENTIALS = "http://alice:S3cret@proxy.corp.example:3128"
CONFIGS = {
    "direct": config_dict(),
    "proxy": config_dict(**{"proxy.http": CREDENTIALS, "proxy.https": CREDENTIALS.replace("3128", "3129")}),
}


def parse(data: dict) -> config.Config:
    return config.parse(yaml.safe_dump(data, sort_keys=False))


def resolved(data: dict) -> Cluster:
    """The resolved model of a config, which step_env takes its proxy from."""
    return Cluster.resolve(parse(data))


def reads(family: str) -> set[str]:
    names, own = set(), set()
    for script in BUILD_SCRIPTS[family]:
        text = script.read_text()
        names |= set(NAME.findall(text))
        own |= set(OWN_GLOBAL.findall(text))
    return names - own - SANDBOX


@pytest.fixture(scope="module")
def boxes() -> dict[str, profiles.Profile]:
    """Every box profile of the repository: the user's boxes and the CI end-to-end box."""
    with pytest.MonkeyPatch.context() as mp:
        use_sources(mp, box_folders=(E2E_BOXES,))
        names = [p.stem for p in (*sorted((ROOT / "boxes").glob("*.yml")), *sorted(E2E_BOXES.glob("*.yml")))]
        return {name: profiles.load(name) for name in names}


def produced(profile: profiles.Profile, which: str) -> dict[str, str]:
    return derive_steps.step_env(profile, resolved(CONFIGS[which])).env


def table_names(family: str) -> set[str]:
    return {name for name, spec in derive_steps.PROFILE_VARIABLES.items() if family in spec.families}


def media_names(family: str) -> set[str]:
    """Build-media file names: set only for a box that downloads that component (another era may not)."""
    return {name for name, (_, families) in derive_steps.MEDIA_VARIABLES.items() if family in families}


def switches(boxes, family: str) -> set[str]:
    """Names a profile sets itself (provision_env), e.g. the CI box's K4W_SKIP_KUBERNETES."""
    return {name for p in boxes.values() if p.os_family == family for name in (p.data.get("provision_env") or {})}


def test_the_scripts_and_boxes_are_found(boxes):
    assert {"ubuntu-1604", "windows-1803", "debian-12-e2e"} <= set(boxes)
    assert {"K4W_FLANNEL_FILE", "K4W_DOCKER_GPG_FINGERPRINT"} <= reads("windows") | reads("ubuntu")
    assert {"K4W_STEP", "K4W_CHANGED", "K4W_CACHE"}.isdisjoint(reads("ubuntu"))  # the library's own globals
    assert "K4W_LIB" in reads("ubuntu")


@pytest.mark.parametrize("which", sorted(CONFIGS))
def test_every_name_a_box_gets_is_read_by_its_scripts(boxes, which):
    """No dead variables: a value nobody reads is a value nobody checks."""
    for name, profile in boxes.items():
        ours = {n for n in produced(profile, which) if n.startswith("K4W_")}
        unread = ours - reads(profile.os_family)
        assert not unread, f"{name}: {sorted(unread)} reach no script in guest/{profile.os_family}"


def test_every_name_the_scripts_read_is_produced(boxes):
    """Everything but the profile values a profile may leave out (a checksum it does not pin) or
    set itself is produced for every box of the family, whenever a proxy is configured."""
    for name, profile in boxes.items():
        family = profile.os_family
        required = reads(family) - table_names(family) - media_names(family) - switches(boxes, family)
        missing = required - set(produced(profile, "proxy"))
        assert not missing, f"{name}: guest/{family} reads {sorted(missing)}, which k4w/derive/step_env.py does not produce"
    for family in derive_steps.FAMILIES:
        unknown = reads(family) - table_names(family) - media_names(family) - switches(boxes, family) - {
            n for p in boxes.values() if p.os_family == family for n in produced(p, "proxy")}
        assert not unknown, f"guest/{family} reads {sorted(unknown)}, which no box gets"


@pytest.mark.parametrize("family", derive_steps.FAMILIES)
def test_every_profile_value_in_the_table_is_read(family):
    unread = table_names(family) - reads(family)
    assert not unread, f"PROFILE_VARIABLES gives the {family} steps {sorted(unread)}, which no script reads"


def test_every_produced_name_is_spelt_out_where_it_is_made(boxes):
    """grep finds the producer: k4w/derive/step_env.py, or the profile that sets it (provision_env)."""
    source = (ROOT / "k4w" / "derive" / "step_env.py").read_text()
    for profile in boxes.values():
        text = profile.path.read_text()
        for which in CONFIGS:
            for name in produced(profile, which):
                if name.startswith("K4W_"):
                    assert f'"{name}"' in source or f"{name}:" in text, f"{name} is not written out in full"


def test_one_name_per_profile_key():
    keys = [spec.key for spec in derive_steps.PROFILE_VARIABLES.values()]
    assert len(keys) == len(set(keys))
    assert all(NAME.fullmatch(name) for name in derive_steps.PROFILE_VARIABLES)


def test_a_component_key_without_a_name_is_refused(tmp_path, monkeypatch):
    data = yaml.safe_load((ROOT / "boxes" / "windows-1803.yml").read_text())
    data["components"]["nssm"]["sha1"] = "0" * 40
    (tmp_path / "windows-1803.yml").write_text(yaml.safe_dump(data))
    use_sources(monkeypatch, box_folders=(tmp_path,))
    cluster = resolved(config_dict())
    with pytest.raises(K4wError, match=r"components\.nssm\.sha1 reaches no guest step: name its step variable in k4w/derive/step_env.py"):
        derive_steps.step_env(profiles.load("windows-1803"), cluster)


# ------------------------------------------------------------------ the proxy: derived once, passed as data


def _resolve(steps: derive_steps.StepEnv, value: str) -> str:
    return steps.resolved(value)


@pytest.mark.parametrize("box", ["ubuntu-1604", "windows-1803"])
def test_credentials_reach_the_environment_only_as_packer_references(boxes, box):
    steps = derive_steps.step_env(boxes[box], resolved(CONFIGS["proxy"]))
    assert steps.secrets and all("S3cret" not in value for value in steps.env.values())
    assert "S3cret" in "".join(_resolve(steps, value) for value in steps.env.values())


def test_the_guests_get_the_derived_proxy_values(boxes):
    cluster = resolved(CONFIGS["proxy"])
    proxy = cluster.proxy
    ubuntu = derive_steps.step_env(boxes["ubuntu-1604"], cluster)
    windows = derive_steps.step_env(boxes["windows-1803"], cluster)
    pairs = {box: dict(p.split("=", 1) for p in _resolve(steps, steps.env["K4W_PROXY_ENV"]).split(" "))
             for box, steps in (("ubuntu", ubuntu), ("windows", windows))}
    assert pairs["ubuntu"] == proxy.env
    # Windows environment names ignore case: one of each pair.
    assert pairs["windows"] == {name: value for name, value in proxy.env.items() if name.isupper()}
    assert _resolve(ubuntu, ubuntu.env["K4W_APT_PROXY_CONF"]) == proxy.apt_conf
    assert proxy.apt_conf.splitlines() == [derive.APT_PROXY_HEADER, f'Acquire::http::Proxy "{CREDENTIALS}";',
                                           f'Acquire::https::Proxy "{proxy.https}";']
    assert ubuntu.env["K4W_PROXY_FILE_MODE"] == "0600"
    assert windows.env["K4W_HTTP_PROXY_HOSTPORT"] == proxy.http_host_port == "proxy.corp.example:3128"
    assert windows.env["K4W_HTTPS_PROXY_HOSTPORT"] == proxy.https_host_port == "proxy.corp.example:3129"
    assert _resolve(windows, windows.env["K4W_HTTP_PROXY_USER"]) == "alice"
    assert _resolve(windows, windows.env["K4W_HTTP_PROXY_PASSWORD"]) == "S3cret"


def test_a_proxy_without_credentials_has_world_readable_files_and_no_credential_variables(boxes):
    cluster = resolved(config_dict(**{"proxy.http": "http://proxy.corp.example:3128"}))
    assert derive_steps.step_env(boxes["ubuntu-1604"], cluster).env["K4W_PROXY_FILE_MODE"] == "0644"
    windows = derive_steps.step_env(boxes["windows-1803"], cluster)
    assert set(windows.secrets) == {"http_proxy"}
    assert not {"K4W_HTTP_PROXY_USER", "K4W_HTTP_PROXY_PASSWORD"} & set(windows.env)


@pytest.mark.parametrize("bad", ["http://a b@proxy:3128", "http://x'y@proxy:3128", 'http://x"y@proxy:3128', "proxy:3128",
                                 "http://x{{y@proxy:3128"])
def test_proxy_urls_no_guest_could_take_are_refused_by_the_config(bad):
    """The one validation of a proxy URL: the templates and guest scripts take its values verbatim
    (apt.conf and systemd quote them in "...", /etc/environment splits on blanks, GRUB on quotes)."""
    with pytest.raises(ConfigError, match="proxy.http"):
        parse(config_dict(**{"proxy.http": bad}))
