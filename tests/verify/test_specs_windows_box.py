"""The Windows box spec, run for real against a simulated healthy 1803 node (tests/fakes/windows_host.py):
it passes a good box and fails exactly the check a planted defect breaks."""

from __future__ import annotations


import pytest
import yaml

HOST = "--hosts=fakewin://worker-win"
PLUGIN = ["-p", "tests.fakes.windows_host"]


@pytest.fixture
def run_windows_spec(run_spec, cluster_yml, monkeypatch):
    def run(defect: str | None = None, config=cluster_yml, proxy_from=None, stage="box"):
        if proxy_from:
            monkeypatch.setenv("FAKE_WINDOWS_PROXY_FROM", str(proxy_from))
        else:
            monkeypatch.delenv("FAKE_WINDOWS_PROXY_FROM", raising=False)
        if defect:
            monkeypatch.setenv("FAKE_WINDOWS_DEFECT", defect)
        else:
            monkeypatch.delenv("FAKE_WINDOWS_DEFECT", raising=False)
        return run_spec(["test_windows_box.py"], HOST, *PLUGIN, "--k4w-box=windows-1803", f"--k4w-config={config}",
                        f"--k4w-stage={stage}")

    return run


def _failed(run) -> list[str]:
    return [t.split("::", 1)[1].split("[", 1)[0] for t in run.result["failed_tests"]]


def _service_of(test_id: str) -> str:
    """The service parameter of a node service test's id (beside the host parameter, in either order)."""
    params = test_id.split("[", 1)[1].rstrip("]").replace("fakewin://worker-win", "")
    return params.strip("-")


def test_a_healthy_box_passes_every_check(run_windows_spec):
    run = run_windows_spec()
    assert run.proc.returncode == 0, run.output
    assert run.result["failed"] == run.result["errors"] == run.result["skipped"] == 0
    assert run.result["passed"] >= 35
    # crictl and imported_images: checks of the containerd era, whose component the 1803 profile does not pin.
    assert {d["check"] for d in run.result["deselected"]} == {"node_services_joined", "crictl", "imported_images"}


def test_planted_defects_fail_their_checks_only(run_windows_spec):
    run = run_windows_spec("public_firewall_off,kubelet_automatic,stale_release")
    assert run.proc.returncode == 1
    assert sorted(_failed(run)) == ["test_firewall_profiles_enabled", "test_node_service_starts_manually",
                                    "test_release_file_matches_profile"]
    assert "test_node_service_starts_manually[" in run.result["failed_tests"][1]
    assert _service_of(run.result["failed_tests"][1]) == "kubelet"


def test_node_runtime_defects_fail_their_checks_only(run_windows_spec):
    run = run_windows_spec("nssm_console,kube_proxy_before_flanneld,task_without_log")
    assert run.proc.returncode == 1
    assert sorted(set(_failed(run))) == ["test_node_service_gets_no_console", "test_node_service_installed_after_its_dependency",
                                         "test_node_start_task_runs_start_node_at_boot"]
    failed = run.result["failed_tests"]
    assert sum("test_node_service_gets_no_console" in t for t in failed) == 1  # flanneld only
    assert {_service_of(t) for t in failed if "installed_after_its_dependency" in t} == {"flanneld", "kube-proxy"}


@pytest.fixture
def proxy_yml(tmp_path, cluster_yml):
    data = yaml.safe_load(cluster_yml.read_text())
    data["proxy"] = {"http": "http://bob:s3cret@proxy.corp.example:3128", "https": None, "no_proxy": ["corp.example"]}
    path = tmp_path / "proxy.yml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_box_built_behind_a_proxy_carries_none(run_windows_spec, proxy_yml):
    run = run_windows_spec(config=proxy_yml)
    assert run.proc.returncode == 0, run.output


def test_a_node_carries_the_proxy_of_its_cluster_yml(run_windows_spec, proxy_yml):
    run = run_windows_spec(config=proxy_yml, proxy_from=proxy_yml, stage="node")
    assert not [t for t in _failed(run) if "proxy" in t], run.output
    assert "proxy" not in {d["check"] for d in run.result["deselected"]}  # the checks ran
    # and they do fail a node that lacks the proxy:
    bare = run_windows_spec(config=proxy_yml, stage="node")
    assert {"test_proxy_environment", "test_winhttp_proxy"} <= set(_failed(bare))


def test_a_box_that_kept_the_build_proxy_fails_the_proxy_checks_without_leaking_it(run_windows_spec, proxy_yml):
    run = run_windows_spec(config=proxy_yml, proxy_from=proxy_yml)
    assert sorted(set(_failed(run))) == ["test_proxy_environment", "test_winhttp_proxy"]
    assert "s3cret" not in run.output


def test_patch_level_defects_fail_their_checks_only(run_windows_spec):
    # other_build: the system runs 17763, not the profile's 17134; release_behind_the_system: the
    # record keeps a UBR the system has moved past; windows_update_disabled: cleanup disabled wuauserv.
    run = run_windows_spec("other_build,release_behind_the_system,windows_update_disabled")
    assert run.proc.returncode == 1
    assert sorted(_failed(run)) == ["test_patch_level_reaches_the_profiles_cumulative_update",
                                    "test_release_file_records_the_running_patch_level",
                                    "test_windows_update_service_is_not_disabled"]


def test_the_minimum_patch_level_is_the_pinned_updates_and_1803_has_none():
    from k4w.model import profiles
    from k4w.verify import expect

    assert expect.minimum_ubr(profiles.load("windows-2022")) == 5622
    assert expect.minimum_ubr(profiles.load("windows-1803")) is None


def test_a_node_folder_any_local_account_can_write_fails_the_acl_check(run_windows_spec):
    # C:\k with C:\'s inherited ACL: any local account could replace kubelet.exe, which runs as LocalSystem.
    run = run_windows_spec("k_inherits")
    assert run.proc.returncode == 1
    assert _failed(run) == ["test_node_folders_are_system_and_administrators_only"]
    failure = run.result["failed_tests"][0]
    assert "test_node_folders_are_system_and_administrators_only" in failure
    assert "C:\\k inherits its parent's ACL" in run.output and "S-1-5-11" in run.output


def test_a_pod_folder_containers_cannot_use_fails_its_check_only(run_windows_spec):
    # C:\var\lib\kubelet\pods as locked as the rest of C:\var: a Nano Server pod (ContainerUser)
    # is denied its service-account token, ConfigMaps, Secrets and emptyDirs.
    run = run_windows_spec("pods_locked")
    assert run.proc.returncode == 1
    assert _failed(run) == ["test_pod_volumes_are_open_to_containers_and_nothing_else_is"]
    assert "C:\\var\\lib\\kubelet\\pods has the explicit ACEs []" in run.output


def test_a_pod_folder_every_local_account_can_read_fails_its_check_only(run_windows_spec):
    # The grant of before, Authenticated Users modify: LocalService, NetworkService and any
    # non-administrator HostProcess pod could read every pod's Secrets and rewrite the scripts
    # DaemonSets run as SYSTEM.
    run = run_windows_spec("pods_authenticated_users")
    assert run.proc.returncode == 1
    assert _failed(run) == ["test_pod_volumes_are_open_to_containers_and_nothing_else_is"]
    assert "C:\\var\\lib\\kubelet\\pods grants S-1-5-11, a group every account on the node is in" in run.output


def test_a_defender_exclusion_by_process_name_alone_fails_its_check_only(run_windows_spec):
    run = run_windows_spec("defender_bare_names")
    assert run.proc.returncode == 1
    assert _failed(run) == ["test_defender_exclusions"]
    assert "Defender excludes processes by name alone, in any folder (a pod's too): ['kubelet.exe']" in run.output


def test_a_box_with_winrm_open_to_everyone_fails_the_winrm_and_account_checks(run_windows_spec):
    # k4w-bootstrap.ps1 as it was: an HTTP listener, 5986 for any address on any NIC, Administrator enabled.
    run = run_windows_spec("winrm_as_before")
    assert run.proc.returncode == 1
    assert sorted(_failed(run)) == ["test_builtin_administrator_is_disabled", "test_winrm_is_open_on_the_management_nic_to_the_host_only",
                            "test_winrm_listens_over_https_only"]
    assert "applies to every interface" in run.output and "admits remote addresses ['Any']" in run.output


def test_a_vm_still_on_the_boxs_winrm_key_fails_the_key_check(run_windows_spec):
    # The listener bound to the bake's certificate, which the build's shutdown deleted, and no boot task to make one.
    run = run_windows_spec("winrm_key_from_the_box")
    assert run.proc.returncode == 1
    assert _failed(run) == ["test_winrm_https_uses_a_key_made_on_this_machine"]
    assert "boot task k4w-winrm-scope does not run winrm-cert.ps1 first" in run.output


def test_the_spec_expects_the_services_each_era_registers():
    # The containerd era's box registers the kubelet alone, after containerd; the seed era all three
    # in a chain after docker (k4w.derive.step_env.node_services, the K4W_NODE_SERVICES of its bake).
    from k4w.derive import step_env as derive_steps
    from k4w.model import profiles

    assert derive_steps.node_services(profiles.load("windows-2022")) == ["kubelet"]
    assert derive_steps.node_service_dependencies(profiles.load("windows-2022")) == {"kubelet": "containerd"}
    assert derive_steps.node_service_dependencies(profiles.load("windows-1803")) == {
        "kubelet": "docker", "flanneld": "kubelet", "kube-proxy": "flanneld"}
