"""A recorded `vagrant` for the flow tests (a fake at the process boundary only).

Every call is appended to $FAKE_VAGRANT_LOG as JSON (argv, cwd, the cluster env). ssh-config
and winrm-config print the recorded outputs in tests/verify/recorded/, with HostName and
Port pointed at $FAKE_VAGRANT_TARGET_PORT on 127.0.0.1 (nobody listens: the spec must fail).
$FAKE_VAGRANT_UP_RC makes `vagrant up` fail.
"""

import json
import os
import re
import sys
from pathlib import Path

RECORDED = Path(__file__).parent / "recorded"


def main() -> int:
    args = sys.argv[1:]
    with open(os.environ["FAKE_VAGRANT_LOG"], "a", encoding="utf-8") as log:
        log.write(json.dumps({"argv": args, "cwd": os.getcwd(),
                              "cluster_json": os.environ.get("K4W_CLUSTER_JSON")}) + "\n")
    port = os.environ.get("FAKE_VAGRANT_TARGET_PORT", "1")
    command = args[0] if args else ""
    if command == "up":
        print("Bringing machine 'default' up with 'hyperv' provider...")
        return int(os.environ.get("FAKE_VAGRANT_UP_RC", "0"))
    if command in ("ssh-config", "winrm-config"):
        name = "vagrant-ssh-config-testbox.txt" if command == "ssh-config" else "vagrant-winrm-config.txt"
        if command == "ssh-config" and len(args) > 1:
            name = "vagrant-ssh-config-cluster.txt"
        # Vagrant's notices go to stderr; only stdout is the config.
        print("==> vagrant: A new version of Vagrant is available: 2.4.1 (installed version: 2.3.4)!", file=sys.stderr)
        text = (RECORDED / name).read_text()
        text = re.sub(r"HostName \S+", "HostName 127.0.0.1", text)
        text = re.sub(r"(?m)^(\s*)Port \d+", rf"\g<1>Port {port}", text)
        print(text, end="")
        return 0
    if command == "destroy":
        print("==> default: Stopping the machine...")
        return 0
    print(f"fake vagrant: unexpected command {args}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
