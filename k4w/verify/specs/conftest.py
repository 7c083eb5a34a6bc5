"""Live testinfra specs: the box specs (test_ubuntu_box.py, test_windows_box.py) and the
cluster spec (test_cluster_*.py). They check real guests, so they need a target and are not
part of the default `pytest` run (testpaths in pyproject.toml; tests/cli/test_collection.py checks).

Run them through `invoke test-box BOX` / `invoke cluster-test`, or by hand, e.g.:
  pytest k4w/verify/specs/test_ubuntu_box.py --hosts=ssh://master --ssh-config=ssh.cfg \
      --k4w-box=ubuntu-1604 --k4w-config=cluster.yml
Without a target they stop with a usage error: testinfra would otherwise quietly check the
machine pytest runs on.

Honesty rules enforced here:
- a check switched off (profile `skip_checks`, or not meant for this --k4w-stage) is
  DESELECTED and listed with its reason in the summary, never counted as passed or skipped;
- a skip inside a spec is turned into a failure;
- a host that cannot be reached fails every check of that host (setup error), fast
  (k4w.verify.reachability, an autouse fixture in each box spec).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from k4w.model import config as config_mod, profiles
from k4w.infra.errors import K4wError
from k4w.verify import selection, specrun
from k4w.verify.kubectl import Kubectl
from k4w.derive.values import Proxy, derive_network, derive_proxy
from k4w.infra.redact import redact

BOX_FAMILIES = ("ubuntu", "windows")


def pytest_addoption(parser):
    group = parser.getgroup("k4w", "k4w live specs")
    group.addoption("--k4w-box", help="box profile the guest was built from (boxes/<box>.yml), for box specs")
    group.addoption("--k4w-config", help="cluster.yml the box/cluster was built from (proxy, nodes, network)")
    group.addoption(
        "--k4w-stage",
        default="box",
        choices=selection.STAGES,
        help="box: a fresh VM from the built box; node: a joined cluster node (default box)",
    )
    group.addoption("--k4w-out", help="build folder of the cluster (kubeconfig, manifests/), for the cluster spec")
    group.addoption(
        "--k4w-node-url",
        action="append",
        default=[],
        metavar="NODE=URL",
        help="testinfra URL of a cluster node, for checks that run on the node itself (repeatable)",
    )
    group.addoption("--k4w-external-url", help="URL outside the cluster for the outbound checks (default: see k4w.verify.matrix)")
    group.addoption("--k4w-result", help="write the outcome counts and deselection reasons to this JSON file")


def pytest_configure(config):
    config.addinivalue_line("markers", "k4w_spec(kind): which live spec a module is: ubuntu, windows or cluster")
    config.addinivalue_line("markers", "k4w_check(name, stage=None, component=None): the check a test belongs to (profile skip_checks names it); "
        "component: it applies only to a box whose profile pins that component")
    config.addinivalue_line("markers", "k4w_deselect(reason): not applicable to this cluster (decided at parametrization)")
    config.addinivalue_line("markers", "k4w_node_services: one test per Windows service the box profile registers (node_services)")
    config._k4w_deselected = []  # [(nodeid, check, reason)]


# ------------------------------------------------------------------ settings the specs read


class Settings:
    def __init__(self, config):
        opt = config.getoption
        self.box = opt("--k4w-box")
        self.config_path = opt("--k4w-config")
        self.stage = opt("--k4w-stage")
        self.out = Path(opt("--k4w-out")).resolve() if opt("--k4w-out") else None
        self.external_url = opt("--k4w-external-url")
        self.node_urls = {}
        for item in opt("--k4w-node-url"):
            name, sep, url = item.partition("=")
            if not sep or not name or not url:
                raise pytest.UsageError(f"--k4w-node-url wants NODE=URL, got {redact(item)!r}")
            self.node_urls[name] = url

    def require(self, option: str, value, why: str):
        if not value:
            raise pytest.UsageError(f"{option} is required {why}")
        return value


def _settings(config) -> Settings:
    if not hasattr(config, "_k4w_settings"):
        config._k4w_settings = Settings(config)
    return config._k4w_settings


def _load_cfg(settings: Settings):
    path = settings.require("--k4w-config", settings.config_path, "(the cluster.yml the guests were built from)")
    try:
        return config_mod.load(path)
    except K4wError as exc:
        raise pytest.UsageError(str(exc)) from None


def _load_profile(settings: Settings) -> profiles.Profile:
    name = settings.require("--k4w-box", settings.box, "for a box spec (the profile name, e.g. ubuntu-1604)")
    try:
        return profiles.load(name)
    except K4wError as exc:
        raise pytest.UsageError(str(exc)) from None


# ------------------------------------------------------------------ collection: targets and deselection


def _spec_kind(item) -> str:
    marker = item.get_closest_marker("k4w_spec")
    if marker is None:
        raise pytest.UsageError(f"{item.nodeid}: a live spec module must set pytestmark = pytest.mark.k4w_spec(...)")
    return marker.args[0]


def _check_of(item) -> selection.Check:
    markers = list(item.iter_markers("k4w_check"))
    if len(markers) != 1:
        raise pytest.UsageError(f"{item.nodeid}: needs exactly one @pytest.mark.k4w_check(name), has {len(markers)}")
    return selection.Check(markers[0].args[0], markers[0].kwargs.get("stage"), markers[0].kwargs.get("component"))


@pytest.hookimpl(tryfirst=True)  # before -k/-m, so check names are validated against the whole spec
def pytest_collection_modifyitems(session, config, items):
    try:
        _select(config, items)
    except pytest.UsageError as exc:
        # Kept for the result file: pytest prints the message on stderr at exit, which a caller
        # reading merged output may see out of order or not at all.
        config._k4w_usage_error = str(exc)
        raise


def _select(config, items):
    if not items:
        return
    settings = _settings(config)
    kinds = {_spec_kind(item) for item in items}
    skips: dict[str, str] = {}
    origin = "k4w"
    components = None
    box_kinds = kinds & set(BOX_FAMILIES)
    if len(box_kinds) > 1:
        raise pytest.UsageError("run one box spec per pytest call: the Ubuntu and the Windows spec need different hosts")
    if box_kinds:
        family = box_kinds.pop()
        if not config.getoption("hosts"):
            raise pytest.UsageError(
                "--hosts is required for a box spec (e.g. --hosts=ssh://NAME --ssh-config=FILE, or winrm://...); "
                "without it testinfra would check the machine pytest runs on"
            )
        profile = _load_profile(settings)
        if profile.os_family != family:
            raise pytest.UsageError(f"box {profile.name} is an {profile.os_family} box; this is the {family} spec")
        _load_cfg(settings)
        skips, origin = selection.skip_checks(profile), f"{profile.path.name} skip_checks"
        components = set(profile.data.get("components") or {})
    if "cluster" in kinds:
        settings.require("--k4w-out", settings.out, "for the cluster spec (the build folder with kubeconfig)")
        kubeconfig = settings.out / "kubeconfig"
        if not kubeconfig.is_file():
            raise pytest.UsageError(f"no kubeconfig at {kubeconfig}: run `invoke cluster-up` first")
        _load_cfg(settings)

    checks = [_check_of(item) for item in items]
    try:
        reasons = selection.deselection_reasons(checks, skips, settings.stage, origin, components)
    except K4wError as exc:
        raise pytest.UsageError(str(exc)) from None
    kept, dropped = [], []
    for item, check, reason in zip(items, checks, reasons):
        not_applicable = item.get_closest_marker("k4w_deselect")
        reason = reason or (not_applicable.args[0] if not_applicable else None)
        if reason is None:
            kept.append(item)
        else:
            dropped.append(item)
            config._k4w_deselected.append((item.nodeid, check.name, reason))
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


# ------------------------------------------------------------------ no skip passes as anything


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and not hasattr(report, "wasxfail"):
        # A live spec never skips: a check either ran or is deselected with a stated reason.
        report.outcome = "failed"
        report.longrepr = f"k4w specs do not skip; this check did not run: {report.longrepr}"


# ------------------------------------------------------------------ reports


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    deselected = getattr(config, "_k4w_deselected", [])
    if not deselected:
        return
    terminalreporter.section("k4w: checks deselected (not run, not counted as passed)")
    by_reason: dict[tuple[str, str], int] = {}
    for _, check, reason in deselected:
        by_reason[(check, reason)] = by_reason.get((check, reason), 0) + 1
    for (check, reason), count in sorted(by_reason.items()):
        terminalreporter.write_line(f"{check} ({count} test{'s' if count > 1 else ''}): {reason}")


def pytest_sessionfinish(session, exitstatus):
    path = session.config.getoption("--k4w-result")
    if not path:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    stats = reporter.stats if reporter else {}
    result = specrun.result_from_stats(stats, getattr(session.config, "_k4w_deselected", []), int(exitstatus))
    if getattr(session.config, "_k4w_usage_error", None):
        result["usage_error"] = session.config._k4w_usage_error
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


# ------------------------------------------------------------------ fixtures


@pytest.fixture(scope="session")
def k4w(pytestconfig) -> Settings:
    return _settings(pytestconfig)


@pytest.fixture(scope="session")
def profile(k4w) -> profiles.Profile:
    return _load_profile(k4w)


@pytest.fixture(scope="session")
def cluster_cfg(k4w):
    return _load_cfg(k4w)


@pytest.fixture(scope="session")
def proxy(cluster_cfg, k4w):
    """The proxy this machine must carry. A box: none, whatever proxy it was built behind (the
    build keeps its proxy, and the credentials in it, off the box). A node: cluster.yml's, which
    cluster-up writes."""
    if k4w.stage == "box":
        return Proxy(enabled=False, http=None, https=None, no_proxy=[])
    return derive_proxy(cluster_cfg)


@pytest.fixture(scope="session")
def network(cluster_cfg):
    return derive_network(cluster_cfg)


@pytest.fixture(scope="session")
def kubectl(k4w) -> Kubectl:
    return Kubectl(k4w.out / "kubeconfig")


@pytest.fixture(scope="session")
def os_label(cluster_cfg) -> str:
    """The node OS label of the cluster's Kubernetes era (the master's profile, like k4w.render)."""
    return profiles.load(cluster_cfg.master.box).data.kubernetes.node_os_label
