"""Vagrant's own `vagrant validate` on the cluster Vagrantfile, with the Hyper-V provider, on any host.

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


@dataclass
class Outcome:
    validated: list[str] = field(default_factory=list)       # machine names Vagrant validated
    not_validated: list[str] = field(default_factory=list)   # machine names left out, and why (in note)
    problems: list[str] = field(default_factory=list)
    note: str = ""


def argv(vagrant: str) -> list[str]:
    # No --ignore-provider: that would swap every provider for a stub and skip its config.
    return [vagrant, "validate"]


def environment(home: Path, cluster_json: Path) -> dict[str, str]:
    """Only what Vagrant needs: PATH for its ruby, a private home with the shim, the cluster's machines."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "VAGRANT_HOME": str(home / "vagrant.d"),
        "VAGRANT_DOTFILE_PATH": str(home / "dotfile"),
        "VAGRANT_CHECKPOINT_DISABLE": "1",
        "VAGRANT_DEFAULT_PROVIDER": PROVIDER,
        "K4W_CLUSTER_JSON": str(cluster_json),
    }


def validate(vagrant: str, vagrant_dir: Path, cluster_json: Path) -> Outcome:
    """Run `vagrant validate` in vagrant_dir for the machines of cluster_json (Windows ones excluded)."""
    outcome = Outcome()
    data = json.loads(Path(cluster_json).read_text(encoding="utf-8"))
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
        shutil.copyfile(SHIM, home / "vagrant.d" / "Vagrantfile")
        subset = home / "cluster.json"
        subset.write_text(json.dumps({**data, "machines": linux}), encoding="utf-8")
        try:
            result = proc.run(argv(vagrant), cwd=vagrant_dir, env=environment(home, subset), timeout=TIMEOUT_SECONDS)
        except proc.TimedOut as exc:
            outcome.problems.append(f"vagrant validate did not finish within {TIMEOUT_SECONDS} s: {exc.output.strip()[-500:]}")
            return outcome
    text = result.output.strip()
    if result.returncode != 0 or SUCCESS not in result.stdout:
        outcome.problems.append(f"vagrant validate (hyperv provider, machines {', '.join(m['name'] for m in linux)}) "
                                f"exited {result.returncode}:\n{text}")
    else:
        outcome.validated = [m["name"] for m in linux]
    return outcome


# ------------------------------------------------------------------ the validator (k4w.validate.VALIDATORS)


def run(cluster: Cluster, out: Path) -> Result:
    """Vagrant's own validate, Hyper-V provider, on the cluster Vagrantfile with OUT's cluster.json."""
    res = Result("cluster Vagrantfile", "vagrant validate (hyperv provider)")
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
    env = environment(Path("$TMP"), Path("$TMP") / "cluster.json")
    shown = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items() if k != "PATH")
    return [f"# in {cluster.sources.vagrant}, with $TMP a throwaway folder: $TMP/vagrant.d/Vagrantfile is "
            f"{SHIM} and $TMP/cluster.json is {out / 'vagrant' / 'cluster.json'} without its Windows machines",
            f"env {shown} {shlex.join(argv(tool('vagrant')))}"]
