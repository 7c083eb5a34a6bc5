"""The Windows kubelet lets in only what a kubeadm Linux kubelet lets in."""

from __future__ import annotations


def _flags(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.split() if "=" in line)


def test_windows_kubelet_authenticates_and_authorizes_through_the_api_server(default_render):
    _, out = default_render
    flags = _flags((out / "nodes" / "worker-win" / "kubelet.args").read_text())
    assert flags["--anonymous-auth"] == "false"
    assert flags["--authentication-token-webhook"] == "true"
    assert flags["--authorization-mode"] == "Webhook"
    # Where kubeadm 1.11 join writes the cluster CA on Windows (C:\etc\kubernetes\pki\ca.crt),
    # beside the bootstrap kubeconfig the same join writes.
    assert flags["--client-ca-file"] == r"C:\etc\kubernetes\pki\ca.crt"
    assert flags["--bootstrap-kubeconfig"].startswith("C:\\etc\\kubernetes\\")
    assert flags["--read-only-port"] == "0"
