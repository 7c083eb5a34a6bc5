"""The libvirt e2e run's cheap parts, checked without a VM: the cluster.yml it writes is one k4w accepts with
the meaning the run relies on, the commands are the ones a user types, and a failing command stops the run
naming its exit code and log."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from ci.e2e import libvirt_run, run as e2e_run
from ci.e2e.phases import E2EError, Log, Phases
from k4w.infra import proc, sources
from k4w.model import config

E2E_BOXES = Path(libvirt_run.__file__).resolve().parent / "boxes"


def load(tmp_path: Path, text: str):
    path = tmp_path / "cluster.yml"
    path.write_text(text, encoding="utf-8")
    with sources.using(sources.Sources(box_folders=(E2E_BOXES,))):
        return config.load(path)


def test_the_run_s_cluster_yml_is_a_libvirt_cluster_on_emulated_cpus_with_isolated_networks(tmp_path):
    cfg = load(tmp_path, libvirt_run.cluster_yml(name=libvirt_run.CLUSTER_NAME, nodes=libvirt_run.NODES,
                                                 box=libvirt_run.BOX, registry={"mirrors": {}}))
    assert cfg.host.provider == "libvirt"
    assert (cfg.libvirt.accelerator, cfg.libvirt.management_forward) == ("tcg", "none")
    assert cfg.network.backend == "vxlan"
    assert [(n.name, n.role) for n in cfg.nodes] == [("master", "master"), ("worker", "worker")]
    # kubeadm init's NumCPU preflight wants 2 on the master; a worker's 1 vCPU leaves the host's 2 cores to it.
    assert [(n.cpus, n.memory) for n in cfg.nodes] == [(2, 3072), (1, 2048)]
    # The run's networks are its own: never a user's k4w networks on the same host.
    assert {cfg.libvirt.management_network, cfg.libvirt.cluster_network} == {"k4w-e2e-management", "k4w-e2e-cluster"}
    assert str(cfg.libvirt.management_cidr.network_address + 1) == libvirt_run.MANAGEMENT_HOST


def test_the_existing_cluster_file_joins_only_a_worker_to_the_first_cluster_s_kubeconfig(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n", encoding="utf-8")
    cfg = load(tmp_path, libvirt_run.cluster_yml(name=libvirt_run.EXISTING_NAME, nodes=(libvirt_run.EXISTING_NODE,),
                                                 box=libvirt_run.BOX, registry={"mirrors": {}}, existing=kubeconfig))
    assert cfg.joins_existing and [n.role for n in cfg.nodes] == ["worker"]
    # Its domain names (<cluster.name>-<node>) cannot be taken for the first cluster's.
    first = {f"{libvirt_run.CLUSTER_NAME}-{n[0]}" for n in libvirt_run.NODES}
    assert f"{libvirt_run.EXISTING_NAME}-{libvirt_run.EXISTING_NODE[0]}" not in first


def test_each_phase_runs_the_command_a_user_types(tmp_path):
    argv = libvirt_run.invoke_argv("cluster-up", tmp_path / "c.yml", tmp_path / "out")
    assert Path(argv[0]).name == "invoke" and Path(argv[0]).parent == Path(sys.executable).parent
    assert argv[1:] == ["cluster-up", "--config", str(tmp_path / "c.yml"), "--out", str(tmp_path / "out")]


def test_a_failing_command_stops_the_run_with_its_exit_code_and_its_log(tmp_path, monkeypatch):
    fake = tmp_path / "invoke"
    fake.write_text("#!/bin/sh\necho \"vagrant up failed for $1\"\nexit 3\n", encoding="utf-8")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(libvirt_run, "invoke_argv", lambda task, c, o: [str(fake), task])
    log = Log(tmp_path / "e2e.log", lambda _: None)
    report = libvirt_run.LibvirtReport()
    with Phases(lambda _: None).phase("cluster-up", 30) as ph, pytest.raises(E2EError) as failed:
        libvirt_run.k4w_command("cluster-up", tmp_path / "c.yml", tmp_path / "out", ph, log, E2E_BOXES, report=report)
    # The failed command is in the report with its exit code and seconds (the first real run's was not).
    assert [(p["command"], p["exit_code"]) for p in report.phases] == [("cluster-up", 3)]
    assert "exit code 3" in str(failed.value) and "vagrant up failed for cluster-up" in str(failed.value)
    assert (tmp_path / "out" / "logs" / "e2e-cluster-up.log").read_text() == "vagrant up failed for cluster-up\n"


@pytest.mark.parametrize("kwargs, refusal", [
    ({"provider": "libvirt", "cluster": False, "box": libvirt_run.BOX}, "add --cluster"),
    ({"provider": "libvirt", "cluster": True, "box": "ubuntu-2404-e2e"}, "--box ubuntu-2604-e2e"),
    ({"provider": "hyperv", "cluster": True, "box": libvirt_run.BOX}, "choose one of qemu, libvirt"),
])
def test_e2e_refuses_a_provider_run_it_cannot_do(tmp_path, kwargs, refusal):
    with pytest.raises(E2EError, match=refusal.replace("-", r"\-")):
        e2e_run.run_e2e(tmp_path, dry_run=True, **kwargs)


def test_every_command_the_run_types_is_one_the_task_accepts():
    """The first real run stopped at `invoke network-up ... --out`: that task has no --out. Each argv the run
    builds must parse against tasks.py's own signature."""
    import inspect

    import tasks

    for task in ("network-up", "cluster-up", "cluster-test", "cluster-reset", "cluster-down"):
        argv = libvirt_run.invoke_argv(task, Path("c.yml"), Path("out"))
        options = {a[2:] for a in argv[2:] if a.startswith("--")}
        body = getattr(tasks, task.replace("-", "_")).body
        assert options <= set(inspect.signature(body).parameters), (task, options)


def test_a_host_whose_libvirtd_is_down_is_named_before_the_bake(tmp_path, monkeypatch):
    """The run's first phase says what doctor says: libvirtd not answering, and its fix, before a bake starts."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "virsh").write_text("#!/bin/sh\necho 'error: failed to connect to the hypervisor' >&2\nexit 1\n")
    (bin_dir / "vagrant").write_text("#!/bin/sh\necho 'vagrant-libvirt (0.11.2, system)'\n")
    for tool in ("virsh", "vagrant"):
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    with pytest.raises(libvirt_run.E2EError, match=r"^libvirt \(qemu:///system\): virsh -c qemu:///system version: error: "
                                                   r"failed to connect to the hypervisor \(fix: start libvirtd") as raised:
        libvirt_run.require_host()
    assert "vagrant-libvirt" not in str(raised.value)


def test_a_failed_run_keeps_each_linux_nodes_diagnostics_before_its_vm_goes(tmp_path, monkeypatch):
    """The third real run's kubeadm init gave up waiting for kube-apiserver and cluster-down took the logs
    with the VMs: now each node's kubelet journal and control-plane logs are read first, through the remote
    cluster-up itself uses (on libvirt: shared ssh connections, tests/infra/test_ssh_mux.py)."""
    from k4w.cluster import remote as remote_mod
    from tests.cluster.conftest import libvirt_config, render_to

    out = tmp_path / "out"
    render_to(out, libvirt_config(**{"cluster.name": "k4wdiag"}))
    commands = []

    class Remote:
        vagrant = remote_mod.cluster_vagrant(out, proc.Runner())

        def run(self, machine, command, stdin=""):
            commands.append((machine.name, command))
            return f"kubelet journal of {machine.name}\n"

    made = []
    monkeypatch.setattr(remote_mod, "cluster_remote", lambda out, timeout: made.append(timeout) or Remote())
    log = Log(tmp_path / "e2e.log", lambda _: None)
    written = libvirt_run.collect_diagnostics(out, E2E_BOXES, log)
    linux = [m["name"] for m in json.loads((out / "vagrant" / "cluster.json").read_text())["machines"]
             if not m["name"].startswith("worker-win")]
    assert [p.name for p in written] == [f"diagnostics-{n}.log" for n in linux]
    assert all(f"kubelet journal of {n}" in (out / "logs" / f"diagnostics-{n}.log").read_text() for n in linux)
    assert [name for name, _ in commands] == linux and all("journalctl -u kubelet" in c for _, c in commands)
    assert made == [libvirt_run.DIAGNOSTICS_TIMEOUT_S]
    assert Remote.vagrant.env["VAGRANT_HOME"] == str(libvirt_run.vagrant_home(out))