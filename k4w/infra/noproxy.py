"""Whether a host download bypasses the proxy: the NO_PROXY rules the guests' tools apply.

Docker, the kubelet, kube-proxy and flanneld read NO_PROXY through Go's
golang.org/x/net/http/httpproxy (golang/net@v0.56.0:http/httpproxy/proxy.go, commit
9e7fdbfadb32b0cc7524100014c5cf9b6adc7729, config.init and useProxy); the host's downloads
(`invoke fetch`, `invoke pin`) follow the same rules, so one no_proxy list means the same thing
everywhere:
- `*` bypasses for every host;
- a CIDR (10.0.0.0/8, fd00::/8) matches a host that is an IP address inside it (a name is not
  resolved for this);
- an IP (optionally ip:port or [ipv6]:port) matches that address;
- a name matches itself and every subdomain (corp.example matches a.corp.example); a leading
  "." (.corp.example) or "*." matches subdomains only;
- an entry with :port matches that port only.
One difference: Go never proxies localhost and loopback addresses; k4w's NO_PROXY lists
localhost and 127.0.0.1 itself (k4w.derive.values.derive_proxy), and another loopback address goes
where the list says.
"""

from __future__ import annotations

import ipaddress

# The port a URL without one uses, by scheme (httpproxy's portMap).
DEFAULT_PORTS = {"http": "80", "https": "443"}


def _split_port(entry: str) -> tuple[str, str]:
    """host, port of "host", "host:port", "[v6]:port" or a bare IPv6 address (port "" if none)."""
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        return host, rest[1:] if rest.startswith(":") else ""
    if entry.count(":") == 1:
        host, port = entry.split(":")
        return host, port
    return entry, ""


def bypasses(host: str, port: str, no_proxy: list[str]) -> bool:
    """Whether a request to host:port goes direct. host as in a URL, without brackets."""
    host = host.strip().lower().rstrip(".")
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    for raw in no_proxy:
        entry = raw.strip().lower()
        if not entry:
            continue
        if entry == "*":
            return True
        if "/" in entry:
            try:
                network = ipaddress.ip_network(entry, strict=False)
            except ValueError:
                continue  # not a CIDR: Go ignores it as well (it matches no domain either)
            if ip is not None and ip.version == network.version and ip in network:
                return True
            continue
        name, entry_port = _split_port(entry)
        if not name or (entry_port and entry_port != port):
            continue
        try:
            if ip is not None and ipaddress.ip_address(name) == ip:
                return True
            ipaddress.ip_address(name)
            continue  # an IP entry matches only that IP
        except ValueError:
            pass
        if name.startswith("*."):
            name = name[1:]
        if name.startswith("."):
            if host.endswith(name):
                return True
        elif host == name or host.endswith("." + name):
            return True
    return False
