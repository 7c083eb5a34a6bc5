#!/usr/bin/env bash
# Step 3: Docker at the profile's pinned version, held against upgrades, with the cgroup
# driver the kubelet will use and rotated container logs.
#
# Ubuntu 16.04: docker-ce from Docker's apt repository for xenial. Its signing key is
# downloaded from K4W_DOCKER_GPG_URL and accepted only if it is exactly one key whose
# fingerprint equals K4W_DOCKER_GPG_FINGERPRINT (published on docs.docker.com); apt then
# checks the repository's signed Release file against that keyring alone (signed-by=), and
# every package against the Release file's checksums.
# Debian 12 (CI): docker.io from Debian's own archive, signed by keys apt already trusts.
#
# Env: K4W_DOCKER_VERSION, K4W_DOCKER_PACKAGE, K4W_DOCKER_PACKAGE_VERSION (exact apt version),
# K4W_DOCKER_CGROUP_DRIVER, K4W_DOCKER_STORAGE_DRIVER; on Ubuntu also K4W_DOCKER_APT_URL,
# K4W_DOCKER_APT_SUITE, K4W_DOCKER_APT_COMPONENT, K4W_DOCKER_GPG_URL, K4W_DOCKER_GPG_FINGERPRINT;
# K4W_DOCKER_REGISTRY_MIRRORS (blank-separated docker.io mirror URLs for daemon.json's
# registry-mirrors, empty = none: Docker mirrors Docker Hub only; k4w/derive/registry.py).
K4W_STEP="03-docker"
set -Eeuo pipefail
trap 'echo "k4w ${K4W_STEP}: ${BASH_SOURCE[0]##*/} line ${LINENO}: \"${BASH_COMMAND}\" exited $?" >&2' ERR
K4W_LIB="${K4W_LIB:-$(dirname "${BASH_SOURCE[0]}")/../lib.sh}"
[[ -r $K4W_LIB ]] || { echo "k4w ${K4W_STEP}: library ${K4W_LIB} not found (Packer uploads guest/ubuntu/lib.sh there)" >&2; exit 1; }
# shellcheck source=../lib.sh
source "$K4W_LIB"

DAEMON_JSON=/etc/docker/daemon.json
KEYRING=/etc/apt/keyrings/k4w-docker.gpg
SOURCES_LIST=/etc/apt/sources.list.d/k4w-docker.list
# Container log rotation: 5 files of 50 MiB per container keep a node's disk from filling.
LOG_MAX_SIZE=50m
LOG_MAX_FILE=5
# Seconds dockerd may take to answer after a (re)start before the build fails.
DOCKER_READY_TIMEOUT=120

k4w_require K4W_DOCKER_VERSION K4W_DOCKER_PACKAGE K4W_DOCKER_PACKAGE_VERSION \
    K4W_DOCKER_CGROUP_DRIVER K4W_DOCKER_STORAGE_DRIVER
k4w_require_defined K4W_DOCKER_REGISTRY_MIRRORS
registry_mirrors=""
# k4w.model.config admits only these characters in a Docker mirror URL (a host, a port, IPv6 brackets; no
# credentials, no path): no JSON quoting needed. In a bracket expression ']' comes first (POSIX ERE).
mirror_url='^https?://[][A-Za-z0-9.:_-]+/?$'
for mirror in $K4W_DOCKER_REGISTRY_MIRRORS; do
    [[ $mirror =~ $mirror_url ]] || k4w_die "K4W_DOCKER_REGISTRY_MIRRORS holds '${mirror}', which is not a mirror URL"
    registry_mirrors+="${registry_mirrors:+, }\"${mirror}\""
done
case "$K4W_DOCKER_CGROUP_DRIVER" in
    cgroupfs | systemd) ;;
    *) k4w_die "K4W_DOCKER_CGROUP_DRIVER must be cgroupfs or systemd, not '${K4W_DOCKER_CGROUP_DRIVER}'" ;;
esac
[[ $K4W_DOCKER_STORAGE_DRIVER =~ ^[a-z0-9]+$ ]] || k4w_die "K4W_DOCKER_STORAGE_DRIVER is not a storage driver name: '${K4W_DOCKER_STORAGE_DRIVER}'"
distro="$(k4w_distro)"

# Prints the fingerprints of the primary keys in a keyring or key file, one per line.
primary_fingerprints() {
    local gnupg_home="$1"
    shift
    gpg --homedir "$gnupg_home" --batch --with-colons --fingerprint "$@" 2>/dev/null |
        awk -F: '/^pub:/ { pub = 1; next } /^fpr:/ && pub { print $10 } { pub = 0 }'
}

# Docker's repository key, verified by fingerprint, as a binary keyring for signed-by=
# (apt 1.2 on xenial reads binary keyrings only).
docker_keyring() {
    local expected keyring gnupg_home actual
    expected="${K4W_DOCKER_GPG_FINGERPRINT// /}"
    expected="${expected^^}"
    [[ $expected =~ ^[0-9A-F]{40}$ ]] || k4w_die "K4W_DOCKER_GPG_FINGERPRINT is not a 40-hex-digit fingerprint"
    keyring="$(k4w_path "$KEYRING")"
    gnupg_home="$(mktemp -d)"
    K4W_CHANGED=0
    if [[ -f $keyring ]] &&
        [[ $(primary_fingerprints "$gnupg_home" --no-default-keyring --keyring "$keyring") == "$expected" ]]; then
        rm -rf "$gnupg_home"
        return 0
    fi
    k4w_fetch "$K4W_DOCKER_GPG_URL" "${gnupg_home}/docker.asc"
    gpg --homedir "$gnupg_home" --batch --quiet --import "${gnupg_home}/docker.asc"
    actual="$(primary_fingerprints "$gnupg_home")"
    if [[ $actual != "$expected" ]]; then
        rm -rf "$gnupg_home"
        k4w_die "the key at ${K4W_DOCKER_GPG_URL} is not exactly the key ${expected} (found: ${actual//$'\n'/ }); refusing to trust it"
    fi
    gpg --homedir "$gnupg_home" --batch --export "$expected" >"${gnupg_home}/docker.gpg"
    k4w_install_file "${gnupg_home}/docker.gpg" "$KEYRING" 0644
    rm -rf "$gnupg_home"
}

docker_repository() {
    local repo_changed=0
    k4w_require K4W_DOCKER_APT_URL K4W_DOCKER_APT_SUITE K4W_DOCKER_APT_COMPONENT \
        K4W_DOCKER_GPG_URL K4W_DOCKER_GPG_FINGERPRINT
    # apt-transport-https: xenial's apt 1.2 cannot fetch https:// sources without it.
    k4w_apt_install apt-transport-https ca-certificates curl gnupg
    docker_keyring
    ((K4W_CHANGED)) && repo_changed=1
    k4w_write_file "$SOURCES_LIST" 0644 "# k4w: Docker's repository, trusted only with its own key
deb [arch=$(dpkg --print-architecture) signed-by=${KEYRING}] ${K4W_DOCKER_APT_URL} ${K4W_DOCKER_APT_SUITE} ${K4W_DOCKER_APT_COMPONENT}"
    ((K4W_CHANGED)) && repo_changed=1
    # A new source needs a fresh index before the install below.
    ((repo_changed)) && K4W_APT_UPDATED=0
    return 0
}

case "$distro" in
    ubuntu-16.04) docker_repository ;;
    debian-12) k4w_log "Debian 12: ${K4W_DOCKER_PACKAGE} from Debian's archive" ;;
esac

# daemon.json before the package, so the first start already uses it.
was_active=0
k4w_unit_active docker && was_active=1
k4w_write_file "$DAEMON_JSON" 0644 "{
  \"exec-opts\": [\"native.cgroupdriver=${K4W_DOCKER_CGROUP_DRIVER}\"],
  \"log-driver\": \"json-file\",
  \"log-opts\": {\"max-size\": \"${LOG_MAX_SIZE}\", \"max-file\": \"${LOG_MAX_FILE}\"},
  \"storage-driver\": \"${K4W_DOCKER_STORAGE_DRIVER}\"${registry_mirrors:+,
  \"registry-mirrors\": [${registry_mirrors}]}
}"
daemon_json_changed=$K4W_CHANGED

k4w_apt_install "${K4W_DOCKER_PACKAGE}=${K4W_DOCKER_PACKAGE_VERSION}"
k4w_hold "$K4W_DOCKER_PACKAGE"

if ! k4w_live; then
    k4w_log "sandbox: not starting docker"
    exit 0
fi
k4w_enable docker
if ! systemctl is-active --quiet docker; then
    systemctl start docker
elif ((daemon_json_changed && was_active)); then
    k4w_log "restarting docker for the new ${DAEMON_JSON}"
    systemctl restart docker
fi
k4w_wait_for "the Docker daemon to answer 'docker info'" "$DOCKER_READY_TIMEOUT" docker info

server_version="$(docker version --format '{{.Server.Version}}')"
if [[ $server_version != "${K4W_DOCKER_VERSION}"* ]]; then
    k4w_die "Docker reports version ${server_version}, the profile pins ${K4W_DOCKER_VERSION}"
fi
driver="$(docker info --format '{{.CgroupDriver}}')"
[[ $driver == "$K4W_DOCKER_CGROUP_DRIVER" ]] || k4w_die "Docker uses cgroup driver ${driver}, expected ${K4W_DOCKER_CGROUP_DRIVER}"
k4w_log "Docker ${server_version} running, cgroup driver ${driver}, ${K4W_DOCKER_PACKAGE} held"
