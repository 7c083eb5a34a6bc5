"""Vagrant's own `vagrant validate` on the cluster Vagrantfile, with the provider cluster.json names (Hyper-V
on any host; libvirt where the vagrant-libvirt plugin is installed).

`ruby -c` proves the Vagrantfile parses; only Vagrant knows its option names and types. Off Windows
the Hyper-V provider refuses to load (its usable? check), so the run gets a throwaway VAGRANT_HOME
whose home Vagrantfile, vagrant_hyperv_shim.rb (the project's), bypasses that check and nothing
else (see the shim). VAGRANT_DEFAULT_PROVIDER=hyperv makes every machine a Hyper-V machine, so the
`node.vm.provider "hyperv"` block is validated by the Hyper-V provider's config class.

Windows machines are left out of that run, and the result says so: their communicator is WinRM,
and Vagrant loads the WinRM communicator (which requires the `winrm` gem) for every machine it
validates (hashicorp/vagrant@v2.3.4 (986a0173), the version Debian installs: lib/vagrant/machine.rb
initialize -> plugins/communicators/winrm/communicator.rb -> shell.rb, `require "winrm"`). No Debian
package provides that gem (`apt-cache search ruby-winrm` finds nothing) and rubygems.org is not
reachable from CI. What goes unchecked by Vagrant is exactly the `if windows` branch of the
Vagrantfile (vm.guest, vm.communicator, winrm.username/password, vm.boot_timeout and the Windows
synced-folder path); the Hyper-V provider block it shares with the Linux machines is checked.

With host.provider libvirt (cluster.json "provider": "libvirt") the run has VAGRANT_DEFAULT_PROVIDER=libvirt
and no shim: vagrant-libvirt's config class validates the `node.vm.provider "libvirt"` block and the
private_network options, without connecting to libvirt (measured: vagrant 2.3.4 + vagrant-libvirt 0.11.2,
an unknown option fails with "The following settings shouldn't exist"). Vagrant knows that provider only
through the plugin: where it is not installed the check did not run, and says so as a failure naming the
install command, never as a pass.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import tempfile
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from k4w.infra import proc
from k4w.derive.cluster import Cluster
from k4w.infra.tools import require
from k4w.validate.result import Result
from k4w.validate.result import rel
from k4w.validate.result import tool

SHIM = Path(__file__).with_name("vagrant_hyperv_shim.rb")
SUCCESS = "Vagrantfile validated successfully."   # hashicorp/vagrant@v2.3.4 templates/locales/en.yml, vagrant.commands.validate.success
PROVIDER = "hyperv"
TIMEOUT_SECONDS = 180
LIBVIRT_PLUGIN = "vagrant-libvirt"
# Debian's package of the plugin (bookworm: vagrant-libvirt 0.11.2), which `vagrant plugin list` shows as "(system)".
LIBVIRT_PLUGIN_INSTALL = "apt-get install -y vagrant-libvirt"


@dataclass
class Outcome:
    validated: list[str] = field(default_factory=list)       # machine names Vagrant validated
    not_validated: list[str] = field(default_factory=list)   # machine names left out, and why (in note)
    problems: list[str] = field(default_factory=list)
    note: str = ""


def argv(vagrant: str) -> list[str]:
    # No --ignore-provider: that would swap every provider for a stub and skip its config.
    return [vagrant, "validate"]


def provider_of(data: dict) -> str:
    """The provider a rendered cluster.json is for (named only for libvirt: k4w.render.templates.cluster_json)."""
    return data.get("provider") or PROVIDER


def environment(home: Path, cluster_json: Path, provider: str = PROVIDER) -> dict[str, str]:
    """Only what Vagrant needs: PATH for its ruby, a private home (with the shim on Hyper-V), the cluster's machines."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "VAGRANT_HOME": str(home / "vagrant.d"),
        "VAGRANT_DOTFILE_PATH": str(home / "dotfile"),
        "VAGRANT_CHECKPOINT_DISABLE": "1",
        "VAGRANT_DEFAULT_PROVIDER": provider,
        "K4W_CLUSTER_JSON": str(cluster_json),
    }


def plugin_argv(vagrant: str) -> list[str]:
    return [vagrant, "plugin", "list"]


def missing_plugin(vagrant: str, env: dict[str, str]) -> str | None:
    """Why `vagrant validate` cannot check the libvirt provider here, or None when vagrant-libvirt is installed
    (as a system plugin or in VAGRANT_HOME: `vagrant plugin list` shows both)."""
    try:
        result = proc.run(plugin_argv(vagrant), env=env, timeout=TIMEOUT_SECONDS)
    except proc.TimedOut:
        return f"`vagrant plugin list` did not finish within {TIMEOUT_SECONDS} s"
    if result.returncode != 0:
        return f"`vagrant plugin list` exited {result.returncode}: {result.output.strip()[-300:]}"
    if not any(line.split(" ", 1)[0] == LIBVIRT_PLUGIN for line in result.stdout.splitlines()):
        return f"the {LIBVIRT_PLUGIN} plugin is not installed ({LIBVIRT_PLUGIN_INSTALL})"
    return None


def validate(vagrant: str, vagrant_dir: Path, cluster_json: Path) -> Outcome:
    """Run `vagrant validate` in vagrant_dir for the machines of cluster_json (Windows ones excluded)."""
    outcome = Outcome()
    data = json.loads(Path(cluster_json).read_text(encoding="utf-8"))
    provider = provider_of(data)
    machines = data.get("machines", [])
    linux = [m for m in machines if m.get("os") != "windows"]
    outcome.not_validated = [m["name"] for m in machines if m.get("os") == "windows"]
    if outcome.not_validated:
        outcome.note = ("not validated by Vagrant: the WinRM settings of " + ", ".join(outcome.not_validated)
                        + " (vm.guest, vm.communicator, winrm.*, vm.boot_timeout), because Vagrant needs the winrm "
                        "gem to load a WinRM machine and neither Debian nor the reachable registries provide it; "
                        "they are checked by `ruby -c` only")
    if not linux:
        return outcome
    with tempfile.TemporaryDirectory(prefix="k4w-vagrant-validate-") as folder:
        home = Path(folder)
        (home / "vagrant.d").mkdir()
        if provider == PROVIDER:
            shutil.copyfile(SHIM, home / "vagrant.d" / "Vagrantfile")
        subset = home / "cluster.json"
        subset.write_text(json.dumps({**data, "machines": linux}), encoding="utf-8")
        env = environment(home, subset, provider)
        if provider != PROVIDER:
            why = missing_plugin(vagrant, env)
            if why:
                outcome.not_validated = [m["name"] for m in machines]
                outcome.problems.append(f"vagrant validate ({provider} provider) did not run: {why}; the Vagrantfile's "
                                        f"{provider} settings are unchecked on this host")
                return outcome
        try:
            result = proc.run(argv(vagrant), cwd=vagrant_dir, env=env, timeout=TIMEOUT_SECONDS)
        except proc.TimedOut as exc:
            outcome.problems.append(f"vagrant validate did not finish within {TIMEOUT_SECONDS} s: {exc.output.strip()[-500:]}")
            return outcome
    text = result.output.strip()
    if result.returncode != 0 or SUCCESS not in result.stdout:
        outcome.problems.append(f"vagrant validate ({provider} provider, machines {', '.join(m['name'] for m in linux)}) "
                                f"exited {result.returncode}:\n{text}")
    else:
        outcome.validated = [m["name"] for m in linux]
    return outcome


# ------------------------------------------------------------------ the validator (k4w.validate.VALIDATORS)


def run(cluster: Cluster, out: Path) -> Result:
    """Vagrant's own validate, with the config's provider, on the cluster Vagrantfile with OUT's cluster.json."""
    res = Result("cluster Vagrantfile", f"vagrant validate ({cluster.config.host.provider} provider)")
    vagrant = require("vagrant")
    vagrantfile, cluster_json = cluster.sources.vagrant / "Vagrantfile", out / "vagrant" / "cluster.json"
    res.checked.append(f"{rel(vagrantfile)} with {rel(cluster_json)}")
    if not cluster_json.is_file():
        res.problems.append(f"{rel(cluster_json)}: not rendered")
        return res
    outcome = validate(vagrant, vagrantfile.parent, cluster_json)
    res.problems += outcome.problems
    res.notes += [outcome.note] if outcome.note else []
    return res


def would_run(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    provider = cluster.config.host.provider
    env = environment(Path("$TMP"), Path("$TMP") / "cluster.json", provider)
    shown = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items() if k != "PATH")
    if provider == PROVIDER:
        return [f"# in {cluster.sources.vagrant}, with $TMP a throwaway folder: $TMP/vagrant.d/Vagrantfile is "
                f"{SHIM} and $TMP/cluster.json is {out / 'vagrant' / 'cluster.json'} without its Windows machines",
                f"env {shown} {shlex.join(argv(tool('vagrant')))}"]
    return [f"# in {cluster.sources.vagrant}, with $TMP a throwaway folder: $TMP/cluster.json is "
            f"{out / 'vagrant' / 'cluster.json'} without its Windows machines; first, that {LIBVIRT_PLUGIN} is installed:",
            f"env {shown} {shlex.join(plugin_argv(tool('vagrant')))}",
            f"env {shown} {shlex.join(argv(tool('vagrant')))}"]
