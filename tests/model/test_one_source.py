"""The proxy, the Kubernetes version and the container runtime are derived in the model only.

k4w.derive.cluster resolves cluster.yml once ("no stage re-derives"): the proxy is Cluster.proxy
(k4w.derive.values.derive_proxy, called by Cluster.resolve), a box's Kubernetes version and container
runtime are Profile.kubernetes_version and Profile.container_runtime, the cluster's are
Cluster.kube.version / version_tag / minor and Cluster.kube.runtime. A module outside the model
that works one of them out again from the raw config or profile fields drifts from the others the
day the rule changes (a "v" prefix, a third runtime, a proxy exception). This walks the syntax tree
of every module of the package and names each such re-derivation.
"""

from __future__ import annotations

import ast

import pytest

from k4w.infra.sources import REPO_ROOT as ROOT

PACKAGE = ROOT / "k4w"
# The model: where these values are derived (paths relative to the repository; update them when
# a module moves).
MODEL = {
    "k4w/model/config.py", "k4w/model/config_rules.py", "k4w/model/profiles.py", "k4w/derive/cluster.py", "k4w/derive/values.py",
    "k4w/model/version_skew.py", "k4w/model/kubeadm_apis.py",
}
# A "v" stripped off a version that is not the cluster's Kubernetes version: (module, receiver as
# ast.unparse writes it) -> why.
OTHER_VERSIONS = {
    ("k4w/devtools/gotools.py", "version"): "a Go module version of tools.lock (the kubeadm the host builds), not a box's",
    ("k4w/devtools/gotools.py", "entry['version']"): "tools.lock's version against the built binary's own report",
    ("k4w/infra/pinned_tools.py", "table['packer']['version']"): "Packer's version in tools.lock",
    ("k4w/infra/pinned_tools.py", "table[f'packer-plugin-{name}']['version']"): "a Packer plugin's version in tools.lock",
    ("k4w/validate/cni_rules.py", "image.rsplit(':', 1)[-1]"): "an image tag (Flannel's), not a Kubernetes version",
    ("k4w/validate/cni_rules.py", "windows"): "flanneld.exe's version in the Windows profile, compared with the image tag",
    ("k4w/verify/specs/test_windows_box.py", "expect.component(profile, 'flannel')"): "Flannel's version",
    ("k4w/verify/expect.py", "actual.strip()"): "the version a guest binary reports, compared with the pin",
    ("k4w/verify/expect.py", "pinned.strip()"): "the pinned side of that comparison",
}
# The live specs (k4w/verify/specs) read cluster.yml on a host with built boxes and no resolved
# model; their proxy fixture calls the one derivation, derive_proxy, itself.
DERIVE_PROXY_CALLERS = {"k4w/derive/cluster.py", "k4w/verify/specs/conftest.py"}
RUNTIME_NAMES = ("containerd", "docker")
RAW_PROXY_FIELDS = ("http", "https", "no_proxy")


def _modules() -> list[tuple[str, ast.Module]]:
    return [(path.relative_to(ROOT).as_posix(), ast.parse(path.read_text(encoding="utf-8"), str(path)))
            for path in sorted(PACKAGE.rglob("*.py"))]


def _is_config(node: ast.expr) -> bool:
    """cfg, config, x.cfg, x.config: the validated cluster.yml (k4w.model.config.Config), not the model."""
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
    return name in ("cfg", "config")


def rederivations(rel: str, tree: ast.Module) -> list[str]:
    """Each place in one module that derives a model value again, as 'path:line: what'."""
    if rel in MODEL:
        return []
    found = []
    for node in ast.walk(tree):
        where = f"{rel}:{getattr(node, 'lineno', '?')}"
        # 1. The Kubernetes version: a "v" stripped by hand, or kubernetes.version read raw.
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("lstrip", "removeprefix", "strip")
                and [a.value for a in node.args if isinstance(a, ast.Constant)] == ["v"]
                and (rel, ast.unparse(node.func.value)) not in OTHER_VERSIONS):
            found.append(f"{where}: {ast.unparse(node)} strips a version's 'v' by hand: use Profile.kubernetes_version, "
                         "Cluster.kube.version_tag or .minor (or name this other version in OTHER_VERSIONS)")
        if (isinstance(node, ast.Attribute) and node.attr == "version"
                and isinstance(node.value, ast.Attribute) and node.value.attr == "kubernetes"):
            found.append(f"{where}: {ast.unparse(node)} reads the profile's raw kubernetes.version: use Profile.kubernetes_version")
        # 2. The proxy: cluster.yml's raw proxy fields, or a second derivation.
        if (isinstance(node, ast.Attribute) and node.attr in RAW_PROXY_FIELDS and isinstance(node.value, ast.Attribute)
                and node.value.attr == "proxy" and _is_config(node.value.value)):
            found.append(f"{where}: {ast.unparse(node)} reads cluster.yml's raw proxy: use the resolved model's Cluster.proxy")
        if (isinstance(node, ast.Call) and (getattr(node.func, "id", None) or getattr(node.func, "attr", None)) == "derive_proxy"
                and rel not in DERIVE_PROXY_CALLERS):
            found.append(f"{where}: {ast.unparse(node)} derives the proxy again: take Cluster.proxy from the resolved model")
        # 3. The container runtime: a runtime's name looked up among the profile's components.
        if (isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant) and node.left.value in RUNTIME_NAMES
                and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops)
                and "component" in ast.unparse(node.comparators[0])):
            found.append(f"{where}: {ast.unparse(node)} works out the container runtime again: use Profile.container_runtime "
                         "(or Cluster.kube.runtime for the master's)")
        if isinstance(node, ast.Name) and node.id == "RUNTIMES":
            found.append(f"{where}: RUNTIMES outside the model: use Profile.container_runtime")
    return sorted(found, key=lambda line: int(line.split(":")[1]))


@pytest.fixture(scope="module")
def modules():
    return _modules()


def test_no_module_outside_the_model_re_derives_the_proxy_kubernetes_version_or_runtime(modules):
    found = [line for rel, tree in modules for line in rederivations(rel, tree)]
    assert not found, "\n".join(found)


def test_the_allowed_exceptions_still_exist(modules):
    """An exception whose code went away would let the next re-derivation in the same module pass."""
    receivers = {(rel, ast.unparse(node.func.value)) for rel, tree in modules for node in ast.walk(tree)
                 if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                 and node.func.attr in ("lstrip", "removeprefix", "strip")
                 and [a.value for a in node.args if isinstance(a, ast.Constant)] == ["v"]}
    assert set(OTHER_VERSIONS) <= receivers, sorted(set(OTHER_VERSIONS) - receivers)


@pytest.mark.parametrize("name, kind", [("proxy_env", ast.FunctionDef), ("CHECKSUM_KEYS", ast.Assign)])
def test_one_definition(modules, name, kind):
    """One function that makes the proxy environment, one list of the checksum keys a profile may carry."""
    defined = [f"{rel}:{node.lineno}" for rel, tree in modules for node in ast.walk(tree)
               if isinstance(node, kind) and (getattr(node, "name", None) == name
                                              or any(getattr(t, "id", None) == name for t in getattr(node, "targets", [])))]
    assert len(defined) == 1, defined


def test_the_rule_sees_each_kind_of_re_derivation():
    """The three kinds as they stood before the model carried them (bake/commands.py, hostprocess.py,
    derive_steps.py), each named by the rule."""
    planted = ast.parse(
        "def pin(cfg):\n"
        "    return derive_proxy(cfg).http, cfg.proxy.https\n"
        "def minor(cluster):\n"
        "    return str(cluster.kube.version).lstrip('v'), profile.data.kubernetes.version\n"
        "def runtime(profile):\n"
        "    return 'containerd' if 'containerd' in (profile.data.get('components') or {}) else 'docker'\n"
    )
    found = rederivations("k4w/planted.py", planted)
    assert [line.split(": ", 1)[0] for line in found] == ["k4w/planted.py:2"] * 2 + ["k4w/planted.py:4"] * 2 + ["k4w/planted.py:6"], found
