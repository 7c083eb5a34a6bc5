#!/usr/bin/env bash
# Install everything k4w and its test suite need on a Debian/Ubuntu machine, idempotently:
# the real validators (shellcheck, debconf-utils, ruby, vagrant), the QEMU end-to-end tools
# (qemu, debootstrap, squid) and a virtualenv with the Python packages. Packer is not Debian's
# (1.6.6 cannot read the HCL2 templates' required_plugins): scripts/build-tools builds the pinned
# one and its plugins into the per-user cache (tools/lock.yml, k4w/pinned_tools.py).
set -euo pipefail
trap 'echo "setup.sh: line $LINENO: \"$BASH_COMMAND\" failed" >&2' ERR

cd "$(dirname "$0")/.."

# Every apt package k4w.tools.INSTALL names is here (tests/cli/test_tools.py checks it).
APT_PACKAGES=(
  vagrant shellcheck debconf-utils cloud-init ruby
  qemu-system-x86 qemu-utils debootstrap squid busybox openssl wimtools
  python3-venv git ca-certificates openssh-client e2fsprogs tar coreutils gnupg
)

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# A virtualenv keeps us clear of PEP 668 "externally managed" system Pythons.
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[test]'
echo "setup: ready. Use .venv/bin/invoke (or activate .venv)."
