"""Every file a user or a kubeconfig names is read the bounded way (k4w.outdir.private.read_bounded): a named
pipe, /dev/zero and a huge file planted at each such key give a message naming the path, at once,
instead of a hang, a MemoryError or minutes of parsing.

The keys: --config (cluster.yml), registry.mirrors.*.ca (when cluster.yml is loaded, and when the
mirror is used), cluster.existing (the kubeconfig), and the kubeconfig's certificate-authority,
client-certificate, client-key and tokenFile."""

from __future__ import annotations

import base64
import os
import re
import threading
import time
from pathlib import Path

import pytest
import yaml

from k4w.model import config
from k4w.outdir import private
from k4w.derive import registry
from k4w.infra.errors import K4wError
from k4w.cluster.kubeapi import load_kubeconfig
from tests.fakes.oci_registry import make_ca_and_server_cert
from tests.helpers import ROOT, invoke, write_config

MODERN = yaml.safe_load((ROOT / "examples" / "cluster-modern.yml").read_text())
PEM = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
HUGE = 2 << 30   # sparse: takes no disk, and read whole it would fill the memory of a small host
BOUND_S = 10     # what each read may take at most; the refusal itself takes milliseconds


def plant(kind: str, folder: Path) -> Path:
    if kind == "fifo":
        path = folder / "planted.fifo"
        os.mkfifo(path)
        return path
    if kind == "dev-zero":
        return Path("/dev/zero")
    path = folder / "planted.huge"
    with open(path, "wb") as fh:
        fh.truncate(HUGE)
    return path


REASON = {"fifo": "is a named pipe (FIFO), not a regular file", "dev-zero": "is a device, not a regular file",
          "huge": "is larger than"}


def bounded(call):
    """call() in a thread that must end within BOUND_S; its exception (or None)."""
    outcome: list = []

    def run():
        try:
            call()
            outcome.append(None)
        except BaseException as exc:   # MemoryError included: that is one of the failures shown
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    started = time.monotonic()
    thread.start()
    thread.join(BOUND_S)
    assert not thread.is_alive(), f"still reading after {BOUND_S} s"
    assert time.monotonic() - started < BOUND_S
    return outcome[0]


def kubeconfig(folder: Path, cluster: dict | None = None, user: dict | None = None) -> Path:
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": "admin@k",
           "contexts": [{"name": "admin@k", "context": {"cluster": "k", "user": "admin"}}],
           "clusters": [{"name": "k", "cluster": {"server": "https://10.0.0.5:6443",
                                                  **(cluster or {"certificate-authority-data": base64.b64encode(PEM).decode()})}}],
           "users": [{"name": "admin", "user": user or {"token": "abcdef.0123456789abcdef"}}]}
    path = folder / "admin.conf"
    path.write_text(yaml.safe_dump(doc))
    path.chmod(0o600)
    return path


def mirror_config(folder: Path, ca: Path) -> str:
    data = yaml.safe_load(yaml.safe_dump(MODERN))
    data["registry"] = {"mirrors": {"registry.k8s.io": {"endpoint": "https://harbor.internal/k8s-proxy", "ca": str(ca)}}}
    return yaml.safe_dump(data)


def the_key_cluster_yml(path: Path, folder: Path):
    return lambda: config.load(path)


def the_key_mirror_ca(path: Path, folder: Path):
    return lambda: config.parse(mirror_config(folder, path), str(folder / "cluster.yml"))


def the_key_mirror_ca_when_used(path: Path, folder: Path):
    """The CA was a good file when cluster.yml was checked and is a pipe by the time the mirror is used."""
    (folder / "ca").mkdir(exist_ok=True)
    good, _, _ = make_ca_and_server_cert(folder / "ca")   # a real CA: config.parse checks each PEM block parses
    spec = config.parse(mirror_config(folder, good), str(folder / "cluster.yml")).registry.mirrors["registry.k8s.io"]
    return lambda: registry.Mirror.of("registry.k8s.io", spec.model_copy(update={"ca": str(path)}))


def the_key_kubeconfig(path: Path, folder: Path):
    return lambda: load_kubeconfig(path)


def the_key_certificate_authority(path: Path, folder: Path):
    return lambda: load_kubeconfig(kubeconfig(folder, cluster={"certificate-authority": str(path)}))


def the_key_client_certificate(path: Path, folder: Path):
    return lambda: load_kubeconfig(kubeconfig(folder, user={"client-certificate": str(path), "client-key-data": "QQ=="}))


def the_key_client_key(path: Path, folder: Path):
    return lambda: load_kubeconfig(kubeconfig(folder, user={"client-certificate-data": base64.b64encode(PEM).decode(),
                                                            "client-key": str(path)}))


def the_key_token_file(path: Path, folder: Path):
    return lambda: load_kubeconfig(kubeconfig(folder, user={"tokenFile": str(path)}))


KEYS = [the_key_cluster_yml, the_key_mirror_ca, the_key_mirror_ca_when_used, the_key_kubeconfig,
        the_key_certificate_authority, the_key_client_certificate, the_key_client_key, the_key_token_file]


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "huge"])
@pytest.mark.parametrize("key", KEYS, ids=lambda f: f.__name__.removeprefix("the_key_"))
def test_a_pipe_a_device_or_a_huge_file_at_any_user_named_key_is_refused_at_once(tmp_path, key, kind):
    path = plant(kind, tmp_path)
    refused = bounded(key(path, tmp_path))
    assert isinstance(refused, K4wError), repr(refused)
    assert str(path) in str(refused) and REASON[kind] in str(refused), str(refused)


def test_a_kubeconfig_alias_bomb_is_refused_before_anything_walks_it(tmp_path):
    """A few hundred bytes that expand to 10^9 strings: refused on the anchor, with its line."""
    lines = ["apiVersion: v1", "kind: Config", "a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    lines += ["current-context: *a8"]
    path = tmp_path / "bomb.conf"
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o600)
    refused = bounded(lambda: load_kubeconfig(path))
    assert isinstance(refused, K4wError), repr(refused)
    assert "line 3: YAML anchors and aliases (&name, *name) are not allowed" in str(refused)
    assert len(str(refused)) < 500


def test_a_mirror_ca_that_is_a_pipe_stops_the_cli_with_a_message(tmp_path):
    """The reported hang, through the real CLI: every command loads cluster.yml and its mirror's CA."""
    fifo = plant("fifo", tmp_path)
    cfg = write_config(tmp_path / "cluster.yml", mirror_config(tmp_path, fifo))
    result = invoke("plan", "--config", str(cfg), "--out", str(tmp_path / "out"), "--dry-run", timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"CA file {fifo} is a named pipe (FIFO), not a regular file" in result.stderr
    assert "Traceback" not in result.stderr


def test_user_named_files_are_read_only_through_the_bounded_reader():
    """The class rule over the source: the modules that read a path a user or a kubeconfig names open
    no file themselves; they call k4w.outdir.private.read_bounded (and load YAML from text it returned)."""
    direct = re.compile(r"\bopen\(|\.read_text\(|\.read_bytes\(|yaml\.(safe_)?load\(\s*(fh|f|handle|path)")
    offenders = [f"{name}:{n}: {line.strip()}"
                 for name in ("k4w/model/config.py", "k4w/cluster/kubeapi.py", "k4w/derive/registry.py")
                 for n, line in enumerate((ROOT / name).read_text().splitlines(), 1)
                 if direct.search(line) and not line.lstrip().startswith("#")]
    assert offenders == [], "read user-named files with k4w.outdir.private.read_bounded:\n" + "\n".join(offenders)


def test_the_reader_gives_a_regular_file_whole_and_refuses_a_folder(tmp_path):
    good = tmp_path / "ca.pem"
    good.write_bytes(PEM)
    assert private.read_bounded(good, len(PEM)) == PEM
    with pytest.raises(private.UnreadableFile, match="is larger than"):
        private.read_bounded(good, len(PEM) - 1)
    with pytest.raises(private.UnreadableFile, match="is a folder, not a file"):
        private.read_bounded(tmp_path, 1 << 20)


def test_a_deeply_nested_kubeconfig_is_refused_naming_its_line(tmp_path):
    path = tmp_path / "deep.conf"
    path.write_text("apiVersion: v1\nkind: Config\nusers: " + "[" * 5000 + "]" * 5000 + "\n")
    path.chmod(0o600)
    refused = bounded(lambda: load_kubeconfig(path))
    assert isinstance(refused, K4wError), repr(refused)
    assert f"{path}: line 3: nested more than 32 levels deep" in str(refused)
