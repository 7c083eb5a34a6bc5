"""Prove a second provisioning run changes nothing: snapshot the guest, re-run, snapshot, diff.

What a snapshot holds (SNAPSHOT_SCRIPT, run as root in the guest):
- every file, folder and link under ROOTS: type, mode, owner, mtime (ns), size, link target,
  and the sha256 of every regular file. /etc and the binary folders show a rewritten file
  (even one rewritten with equal content: its mtime moves); /var/lib/dpkg and
  /var/lib/apt/lists show an install or an `apt-get update` (dpkg's status file and apt's
  indexes are rewritten by them). /var/log/dpkg.log is no witness here: 07-cleanup empties
  the logs on every run, so it would hide an install.
- for each unit in SERVICES: InvocationID (new on every start), ActiveEnterTimestampMonotonic,
  NRestarts, MainPID, ActiveState: a restart changes the first two.
- every installed package with version and status.

A change is allowed only if EXPECTED names it with its reason; all others fail the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ROOTS = ("/etc", "/opt/cni/bin", "/usr/local/bin", "/var/lib/dpkg", "/var/lib/apt/lists")
SERVICES = ("docker.service", "containerd.service", "ssh.service", "dbus.service", "systemd-networkd.service",
            "systemd-journald.service", "kubelet.service")
SERVICE_FIELDS = ("Id", "LoadState", "ActiveState", "InvocationID", "ActiveEnterTimestampMonotonic", "NRestarts", "MainPID")

# Bash, run as root in the guest. Tab-separated so any path without tabs/newlines is exact.
SNAPSHOT_SCRIPT = r"""
set -euo pipefail
roots=(%(roots)s)
echo '### files'
for root in "${roots[@]}"; do
    if [[ -e $root ]]; then
        find "$root" -xdev -printf '%%y\t%%m\t%%u:%%g\t%%T@\t%%s\t%%p\t%%l\n'
    else
        printf 'absent\t%%s\n' "$root"
    fi
done
echo '### sha256'
for root in "${roots[@]}"; do
    if [[ -e $root ]]; then
        find "$root" -xdev -type f -print0 | xargs -0 -r sha256sum
    fi
done
echo '### services'
systemctl show --property=%(fields)s %(services)s
echo '### packages'
dpkg-query --show --showformat='${Package}\t${Version}\t${db:Status-Abbrev}\n'
""" % {"roots": " ".join(ROOTS), "fields": ",".join(SERVICE_FIELDS), "services": " ".join(SERVICES)}


@dataclass
class Snapshot:
    files: dict[str, dict] = field(default_factory=dict)  # path -> {type, mode, owner, mtime, size, link, sha256}
    absent: set[str] = field(default_factory=set)  # roots that do not exist
    services: dict[str, dict] = field(default_factory=dict)  # unit -> {field: value}
    packages: dict[str, str] = field(default_factory=dict)  # package -> "version status"

    def counts(self) -> dict:
        return {
            "paths": len(self.files),
            "checksums": sum(1 for f in self.files.values() if f.get("sha256")),
            "services": len(self.services),
            "packages": len(self.packages),
        }


def parse(text: str) -> Snapshot:
    snap = Snapshot()
    section = None
    service: dict[str, str] = {}

    def flush_service() -> None:
        if service.get("Id"):
            snap.services[service["Id"]] = dict(service)
        service.clear()

    for line in text.splitlines():
        if line.startswith("### "):
            flush_service()
            section = line[4:].strip()
            continue
        if section == "files" and line:
            parts = line.split("\t")
            if parts[0] == "absent":
                snap.absent.add(parts[1])
                continue
            kind, mode, owner, mtime, size, path, link = parts[:7]
            snap.files[path] = {"type": kind, "mode": mode, "owner": owner, "mtime": mtime, "size": size, "link": link}
        elif section == "sha256" and line:
            digest, _, path = line.partition("  ")
            if path in snap.files:
                snap.files[path]["sha256"] = digest
        elif section == "services":
            if not line.strip():
                flush_service()
            else:
                key, _, value = line.partition("=")
                service[key] = value
        elif section == "packages" and line:
            name, version, status = (line.split("\t") + ["", ""])[:3]
            snap.packages[name] = f"{version} {status}"
    flush_service()
    if section is None:
        raise ValueError("not a snapshot: no '### files' section (did the snapshot script run?)")
    return snap


@dataclass(frozen=True)
class Change:
    kind: str  # file | service | package | root
    name: str
    what: str  # e.g. "added", "removed", "mtime, sha256"
    before: str
    after: str

    def line(self) -> str:
        return f"{self.kind} {self.name}: {self.what}: {self.before} -> {self.after}"


@dataclass(frozen=True)
class Expected:
    kind: str
    name: str
    reason: str
    # service: the unit restarts by itself (Restart=always) during the run; allowed only when its
    # automatic-restart counter rose, i.e. systemd restarted it, not a step.
    restarts_by_itself: bool = False

    def allows(self, change: Change, before: Snapshot, after: Snapshot) -> bool:
        if (change.kind, change.name) != (self.kind, self.name):
            return False
        if self.kind == "service" and self.restarts_by_itself:
            old, new = before.services[self.name], after.services[self.name]
            fields = set(change.what.split(", "))
            return (fields <= RESTART_FIELDS | {"NRestarts", "ActiveState"}
                    and int(new.get("NRestarts") or 0) > int(old.get("NRestarts") or 0))
        if self.kind == "service":
            # A restart only: a new invocation and main process; never stopped, failed or reloaded.
            fields = set(change.what.split(", "))
            return (fields <= RESTART_FIELDS
                    and before.services[self.name].get("ActiveState") == after.services[self.name].get("ActiveState") == "active")
        if self.name == "/etc/machine-id":
            # Only "emptied": mode, owner and type stay, a non-empty id becomes an empty file.
            old, new = before.files.get(self.name), after.files.get(self.name)
            return bool(old and new and old["size"] != "0" and new["size"] == "0"
                        and all(old[k] == new[k] for k in ("type", "mode", "owner")))
        return False


RESTART_FIELDS = {"InvocationID", "ActiveEnterTimestampMonotonic", "MainPID"}

EXPECTED = (
    Expected(
        "service",
        "docker.service",
        "01-proxy.sh gives docker the build's proxy in a runtime drop-in under /run, which a box does not "
        "keep (no proxy credentials in a box); the re-run on the booted box adds it again, and docker "
        "restarts once to read it",
    ),
    Expected(
        "service",
        "containerd.service",
        "the same for containerd on a containerd-era box: 01-proxy.sh's runtime drop-in under /run is gone from "
        "the booted box, the re-run adds it again, and the running containerd restarts once to read it",
    ),
    Expected(
        "service",
        "kubelet.service",
        "an enabled kubelet that kubeadm has not configured yet exits and is restarted by systemd every 10 s "
        "until kubeadm init/join writes /var/lib/kubelet/config.yaml (kubeadm's documented crash loop; the "
        "seed era's CI stand-in kubelet exits the same way); its automatic-restart count rose, so no step restarted it",
        restarts_by_itself=True,
    ),
    Expected(
        "file",
        "/etc/machine-id",
        "07-cleanup.sh empties it on every run so each VM made from the box gets its own id; this guest's "
        "first boot wrote a new one, so the re-run empties it again (systemd writes a fresh one at the next boot)",
    ),
)


def diff(before: Snapshot, after: Snapshot) -> list[Change]:
    changes: list[Change] = []
    for root in sorted(before.absent ^ after.absent):
        changes.append(Change("root", root, "appeared" if root in before.absent else "disappeared", "", ""))
    for path in sorted(set(before.files) | set(after.files)):
        old, new = before.files.get(path), after.files.get(path)
        if old is None:
            changes.append(Change("file", path, "added", "", _describe(new)))
        elif new is None:
            changes.append(Change("file", path, "removed", _describe(old), ""))
        else:
            fields = [k for k in ("type", "mode", "owner", "mtime", "size", "link", "sha256") if old.get(k) != new.get(k)]
            if fields:
                changes.append(Change("file", path, ", ".join(fields), _pick(old, fields), _pick(new, fields)))
    for unit in sorted(set(before.services) | set(after.services)):
        old, new = before.services.get(unit, {}), after.services.get(unit, {})
        fields = [k for k in SERVICE_FIELDS if old.get(k) != new.get(k)]
        if fields:
            changes.append(Change("service", unit, ", ".join(fields), _pick(old, fields), _pick(new, fields)))
    for name in sorted(set(before.packages) | set(after.packages)):
        old, new = before.packages.get(name), after.packages.get(name)
        if old != new:
            what = "installed" if old is None else "removed" if new is None else "changed"
            changes.append(Change("package", name, what, old or "", new or ""))
    return changes


def classify(changes: list[Change], before: Snapshot, after: Snapshot) -> tuple[list[tuple[Change, str]], list[Change]]:
    """(expected changes with their reason, unexpected changes)."""
    expected, unexpected = [], []
    for change in changes:
        rule = next((e for e in EXPECTED if e.allows(change, before, after)), None)
        if rule:
            expected.append((change, rule.reason))
        else:
            unexpected.append(change)
    return expected, unexpected


def report(before: Snapshot, after: Snapshot, changes: list[Change]) -> list[str]:
    """What was compared and what differed, for the test output and the report."""
    counts = before.counts()
    expected, unexpected = classify(changes, before, after)
    lines = [
        f"compared {counts['paths']} paths under {', '.join(r for r in ROOTS if r not in before.absent)} "
        f"(type, mode, owner, mtime, size, link target; sha256 of {counts['checksums']} files)"
        + (f"; absent before and after: {', '.join(sorted(before.absent & after.absent))}" if before.absent & after.absent else ""),
        f"compared {counts['services']} units ({', '.join(sorted(before.services))}): {', '.join(SERVICE_FIELDS[1:])}",
        f"compared {counts['packages']} packages (version and dpkg status)",
        f"differences: {len(changes)} ({len(expected)} expected, {len(unexpected)} unexpected)",
    ]
    lines += [f"  expected   {c.line()}  [{reason}]" for c, reason in expected]
    lines += [f"  UNEXPECTED {c.line()}" for c in unexpected]
    return lines


def _describe(entry: dict | None) -> str:
    if not entry:
        return ""
    return f"{entry['type']} {entry['mode']} {entry['owner']} size {entry['size']}"


def _pick(entry: dict, fields: list[str]) -> str:
    return " ".join(f"{k}={entry.get(k, '')}" for k in fields)
