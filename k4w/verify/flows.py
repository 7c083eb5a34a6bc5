"""The test flows behind `invoke test-box`, `invoke cluster-test` and the CI ssh-target run.

test_box        boot a throwaway VM from OUT/boxes/<box>.json, run the box spec, destroy the
                VM (also on failure), record the result in OUT/boxes/<box>.record.json.
cluster_test    node specs on every cluster node (stage node) + the cluster spec; JUnit XML
                and a markdown summary in OUT/reports/.
test_ssh_target the Ubuntu box spec against any SSH target (the CI QEMU guest).

Each flow raises K4wError when something did not pass, after writing its record/report.
"""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import yaml

from k4w.infra import files as outfiles
from k4w.model import pins, profiles
from k4w import render
from k4w.infra import ui
from ..bake import catalogue
from ..cluster.machines import cluster_vagrant, load_cluster
from k4w.derive.cluster import Cluster
from k4w.model.config import Config
from k4w.infra.errors import K4wError
from k4w.infra.proc import Runner
from k4w.infra.redact import redact
from k4w.infra.ssh_mux import Mux
from k4w.infra.vagrant import Vagrant
from . import discovery, records, report, specrun, throwaway

STAGE_BOX, STAGE_NODE = "box", "node"


def _stamp() -> str:
    return dt.datetime.now().strftime("%Y%m%d-%H%M%S")


def _write_config(cfg: Config, folder: Path, dry_run: bool, config_file: Path | None = None) -> Path:
    """The validated config as a file the spec process loads again (same values, same checks), with the
    user's pins beside it (config_file's k4w-pins.yml), so the spec expects the digests the build used."""
    path = folder / "cluster.yml"
    if not dry_run:
        outfiles.write_file(path, yaml.safe_dump(cfg.document(), sort_keys=False))
        user_pins = pins.pins_path(config_file) if config_file else None
        if user_pins and user_pins.is_file():
            outfiles.write_file(pins.pins_path(path), user_pins.read_text(encoding="utf-8"))
    return path


def _summarise(title: str, results: dict[str, dict]) -> None:
    rows = [
        [suite, specrun.outcome(r), r["passed"], r["failed"], r["errors"], r["xfailed"], len(r["deselected"])]
        for suite, r in results.items()
    ]
    ui.table(title, ["suite", "result", "passed", "failed", "errors", "expected failures", "deselected"], rows)


def _box_spec_args(box: str, config_file: Path, stage: str) -> list[str]:
    return [f"--k4w-box={box}", f"--k4w-config={config_file}", f"--k4w-stage={stage}"]


def _failed_result(error: str) -> dict:
    """What a suite that never got to run its checks reports: nothing passed."""
    return {"passed": 0, "failed": 0, "errors": 1, "skipped": 0, "xfailed": 0, "xpassed": 0, "deselected": [],
            "failed_tests": [f"(did not run) {error}"], "expected_failures": [], "exit_status": 1, "junit": ""}


# ------------------------------------------------------------------ test-box


def _connect_args(profile, vagrant: Vagrant, workdir: Path) -> list[str]:
    """Testinfra target options for the throwaway VM, from Vagrant's own connection settings."""
    if profile.is_windows:
        text = vagrant.winrm_config()
        if vagrant.dry_run:
            return ["--hosts=winrm://vagrant:***@<from vagrant winrm-config>"]
        return ["--hosts=" + ",".join(h.url() for h in discovery.parse_winrm_config(text))]
    ssh_config = workdir / "ssh-config"
    text = vagrant.ssh_config()
    if vagrant.dry_run:
        return [f"--hosts=ssh://{throwaway.MACHINE}", f"--ssh-config={ssh_config}"]
    hosts = discovery.parse_ssh_config(text)
    outfiles.write_file(ssh_config, text)
    return ["--hosts=" + ",".join(h.url() for h in hosts), f"--ssh-config={ssh_config}"]


def _box_request(out: Path, box: str, spec: str, args: list[str], suite: str | None = None) -> specrun.SpecRequest:
    return specrun.SpecRequest(
        suite=suite or f"box {box}",
        spec=spec,
        args=args,
        junit=out / "reports" / f"test-box-{box}.xml",
        result=out / "reports" / f"test-box-{box}.json",
    )


def _record_box_result(out: Path, box: str, request: specrun.SpecRequest, result: dict, target: str, started: str,
                       stage: str, error: str | None = None) -> dict:
    """Fill the box record's `test` slot, show the counts, and raise unless everything passed."""
    if error:
        result = _failed_result(error)
    entry = records.test_entry(result, target, started, records.now(), stage)
    if error:
        entry["error"] = redact(error)
    path = records.record_test(out, box, entry)
    _summarise(request.suite, {request.suite: result})
    ui.say(f"recorded in {path}; JUnit: {request.junit}")
    if error:
        raise K4wError(f"{request.suite}: the spec could not run: {error}")
    if specrun.outcome(result) != "passed":
        raise K4wError(f"{request.suite}: {result['failed']} failed, {result['errors']} errors (see {request.junit})")
    return result


def _box_ref(out: Path, profile, dry_run: bool) -> throwaway.BoxRef:
    try:
        return throwaway.box_ref(out, profile)
    except K4wError:
        if not dry_run:
            raise
    missing = catalogue.catalogue_path(out, profile.name)
    ui.say(f"note: {missing} does not exist yet; showing the commands for after the build", style="yellow")
    return throwaway.BoxRef(catalogue.BOX_PREFIX + profile.name, "<newest version in the catalogue>", missing.as_uri())


def test_box(cluster: Cluster, box: str, out: Path, dry_run: bool = False) -> dict:
    cfg = cluster.config
    profile = profiles.load(box)
    out = Path(out).resolve()
    stamp = _stamp()
    workdir = out / "test-box" / f"{box}-{stamp}"
    runner = Runner(log=out / "logs" / f"test-box-{box}-{stamp}.log", dry_run=dry_run)
    vagrant = Vagrant(workdir, runner=runner)
    ref = _box_ref(out, profile, dry_run)
    vagrantfile = throwaway.vagrantfile(ref, profile, f"{cfg.cluster.name}-test-{box}-{stamp}", cfg.hyperv.management_switch,
                                        box_user_secrets=render.box_user_secrets_path(out).resolve())
    config_file = _write_config(cfg, workdir, dry_run, cluster.config_file)
    ui.say(f"test-box {box}: throwaway VM in {workdir}")
    if dry_run:
        ui.say(f"would write {workdir / 'Vagrantfile'}:\n{vagrantfile}")
    else:
        outfiles.write_file(workdir / "Vagrantfile", vagrantfile)

    request = _box_request(out, box, profile.os_family, [])
    started = records.now()
    result: dict = {}
    error: str | None = None
    try:
        vagrant.up()
        request.args = _connect_args(profile, vagrant, workdir) + _box_spec_args(box, config_file, STAGE_BOX)
        result = specrun.run(request, runner)
    except K4wError as exc:
        error = str(exc)
    finally:
        # Always, also after a failed boot or spec: a throwaway VM must not outlive its test.
        code = vagrant.destroy(check=False)
        if code == 0 and not dry_run:
            shutil.rmtree(workdir, ignore_errors=True)
        elif code != 0:
            ui.error(f"could not destroy the throwaway VM; remove it with: cd {workdir} && vagrant destroy --force")
    if dry_run:
        return {}
    return _record_box_result(out, box, request, result, f"throwaway VM from {ref.name} {ref.version}", started,
                              STAGE_BOX, error)


# ------------------------------------------------------------------ any SSH target (CI QEMU guest)


def test_ssh_target(cfg: Config, box: str, host: str, port: int, user: str, key_file: Path, out: Path,
                    dry_run: bool = False, stage: str = STAGE_BOX, config_file: Path | None = None) -> dict:
    """Run the Ubuntu box spec against host:port as user with key_file; record it for the box.
    config_file: the cluster.yml cfg was read from, whose k4w-pins.yml the spec reads too."""
    profile = profiles.load(box)
    if profile.is_windows:
        raise K4wError(f"{box} is a Windows box; the SSH target run is for Ubuntu boxes")
    out = Path(out).resolve()
    workdir = out / "test-box" / f"{box}-ssh-{_stamp()}"
    runner = Runner(log=out / "logs" / f"test-ssh-{box}.log", dry_run=dry_run)
    alias = "k4w-target"
    ssh_config = workdir / "ssh-config"
    config_file = _write_config(cfg, workdir, dry_run, config_file)
    if not dry_run:
        outfiles.write_file(ssh_config, discovery.ssh_target_config(alias, host, port, user, key_file))
    target = f"ssh {user}@{host}:{port}"
    request = _box_request(out, box, profile.os_family,
                           [f"--hosts=ssh://{alias}", f"--ssh-config={ssh_config}", *_box_spec_args(box, config_file, stage)],
                           suite=f"box {box} ({target})")
    started = records.now()
    result = specrun.run(request, runner)
    if dry_run:
        return {}
    return _record_box_result(out, box, request, result, target, started, stage)


# ------------------------------------------------------------------ cluster-test


def _node_hosts(cluster, vagrant: Vagrant, folder: Path, mux: Mux | None = None) -> tuple[dict, Path]:
    """{machine name: testinfra URL} for every node, and the ssh-config file the Linux URLs need. With a mux
    (a libvirt cluster) the file also names its socket folder: testinfra already asks ssh for ControlMaster
    and ControlPersist but gives no ControlPath, and without one every check opens a connection of its own."""
    urls: dict[str, str] = {}
    ssh_config = folder / "ssh-config"
    linux = [m.name for m in cluster.machines if not m.is_windows]
    if linux:
        text = vagrant.ssh_config(linux)
        hosts = {m: f"ssh://{m}" for m in linux} if vagrant.dry_run else {h.alias: h.url() for h in discovery.parse_ssh_config(text)}
        if not vagrant.dry_run:
            outfiles.write_file(ssh_config, text + ("\n" + mux.config_block() if mux else ""))
        urls.update(hosts)
    for machine in (m for m in cluster.machines if m.is_windows):
        text = vagrant.winrm_config(machine.name)
        urls[machine.name] = (
            f"winrm://vagrant:***@<{machine.name} from vagrant winrm-config>" if vagrant.dry_run
            else discovery.parse_winrm_config(text)[0].url()
        )
    missing = [m.name for m in cluster.machines if m.name not in urls]
    if missing:
        raise K4wError(f"vagrant printed no connection settings for {', '.join(missing)}")
    return urls, ssh_config


def cluster_test(model: Cluster, out: Path, dry_run: bool = False) -> dict[str, dict]:
    cfg = model.config  # named model: `cluster` below is cluster.json's machines, as in cluster-up
    out = Path(out).resolve()
    reports = out / "reports"
    folder = out / "cluster-test"
    runner = Runner(log=out / "logs" / f"cluster-test-{_stamp()}.log", dry_run=dry_run)
    cluster = load_cluster(out)
    vagrant = cluster_vagrant(out, runner)
    config_file = _write_config(cfg, folder, dry_run, model.config_file)
    unknown = [n.name for n in cfg.nodes if n.name not in {m.name for m in cluster.machines}]
    if unknown:
        raise K4wError(f"nodes {', '.join(unknown)} are not in {out / 'vagrant' / 'cluster.json'}: run `invoke render`")
    mux = Mux() if cluster.on_libvirt else None
    urls, ssh_config = _node_hosts(cluster, vagrant, folder, mux)

    requests = []
    for box in cfg.boxes():
        profile = profiles.load(box)
        names = [n.name for n in cfg.nodes if n.box == box]
        args = ["--hosts=" + ",".join(urls[n] for n in names)]
        if not profile.is_windows:
            args.append(f"--ssh-config={ssh_config}")
        requests.append(specrun.SpecRequest(
            suite=f"nodes {box}",
            spec=profile.os_family,
            args=args + _box_spec_args(box, config_file, STAGE_NODE),
            junit=reports / f"cluster-test-nodes-{box}.xml",
            result=reports / f"cluster-test-nodes-{box}.json",
        ))
    windows_urls = [f"--k4w-node-url={m.name}={urls[m.name]}" for m in cluster.machines if m.is_windows]
    requests.append(specrun.SpecRequest(
        suite="cluster",
        spec="cluster",
        args=[f"--k4w-out={out}", f"--k4w-config={config_file}", *windows_urls],
        junit=reports / "cluster-test-cluster.xml",
        result=reports / "cluster-test-cluster.json",
    ))

    results: dict[str, dict] = {}
    for request in requests:
        try:
            results[request.suite] = specrun.run(request, runner)
        except K4wError as exc:  # the suite never ran (usage error, crash): a failure, not a gap
            results[request.suite] = _failed_result(str(exc))
    if dry_run:
        return {}
    summary = report.write(reports / "cluster-test.md", report.markdown(results, "k4w cluster-test", records.now()))
    _summarise("cluster-test", results)
    ui.say(f"summary: {summary}")
    bad = [suite for suite, r in results.items() if specrun.outcome(r) != "passed"]
    if bad:
        raise K4wError(f"cluster-test: {', '.join(bad)} did not pass (see {summary})")
    return results


# Named after the tasks, but not tests: keep pytest from collecting them if imported into a test module.
test_box.__test__ = False
test_ssh_target.__test__ = False
