# shellcheck shell=bash
# shellcheck disable=SC2034  # K4W_* globals are read by the steps that source this library.
# k4w guest library for the Linux box steps (provision/ubuntu/NN-*.sh). Sourced, never run.
#
# Packer's file provisioner uploads it to $K4W_LIB (/tmp/k4w-lib.sh) before the steps run;
# run locally, each step finds it beside itself.
#
# Conventions every step relies on:
# - Values come only from K4W_* environment variables (docs/internals.md); k4w_require
#   fails with the variable's name and where it comes from.
# - Files are written only when their content or mode differs (k4w_write_file), so a second
#   run rewrites nothing; K4W_CHANGED tells the caller whether the last write changed it.
# - K4W_ROOT (default empty) is an offline sandbox: every path is taken under it and nothing
#   touches the running system (no apt, systemctl, sysctl, modprobe). Tests use it.

# Where the values come from, for error messages.
K4W_ENV_SOURCE="the Packer provisioner's environment_vars (rendered from boxes/<box>.yml)"
# Downloads and generated keyrings are kept here between steps; 07-cleanup removes it.
K4W_CACHE="/var/cache/k4w"
# State that lets a second run prove an install is complete without downloading again.
K4W_STATE="/var/lib/k4w"

K4W_CHANGED=0
K4W_APT_UPDATED=0

k4w_log() {
    printf 'k4w %s: %s\n' "${K4W_STEP:-${0##*/}}" "$*"
}

k4w_die() {
    printf 'k4w %s: ERROR: %s\n' "${K4W_STEP:-${0##*/}}" "$*" >&2
    exit 1
}

# k4w_require VAR... - each must be set and non-empty.
k4w_require() {
    local name
    for name in "$@"; do
        if [[ -z ${!name:-} ]]; then
            k4w_die "missing ${name}: it must be set (non-empty) by ${K4W_ENV_SOURCE}"
        fi
    done
}

# k4w_require_defined VAR... - each must be set; empty is a valid value (e.g. "no proxy").
k4w_require_defined() {
    local name
    for name in "$@"; do
        if [[ -z ${!name+set} ]]; then
            k4w_die "missing ${name}: it must be set (empty means 'none') by ${K4W_ENV_SOURCE}"
        fi
    done
}

# k4w_require_one_of VAR_A VAR_B - at least one of two alternatives (e.g. sha256 or sha256_url).
k4w_require_one_of() {
    if [[ -z ${!1:-} && -z ${!2:-} ]]; then
        k4w_die "missing ${1} or ${2}: one of them must be set by ${K4W_ENV_SOURCE}"
    fi
}

k4w_flag() {
    # k4w_flag VAR - true when VAR is 1/true/yes (how the template renders YAML booleans).
    case "${!1:-0}" in
        1 | true | True | yes) return 0 ;;
        *) return 1 ;;
    esac
}

k4w_live() {
    # True on a real guest; false in the K4W_ROOT sandbox.
    [[ -z ${K4W_ROOT:-} ]]
}

k4w_path() {
    printf '%s%s' "${K4W_ROOT:-}" "$1"
}

# Prints "ubuntu-16.04", "ubuntu-24.04", "ubuntu-26.04" or "debian-12". Production boxes are Ubuntu 16.04,
# 24.04 and 26.04; CI can only boot Debian 12 in QEMU, and runs these same steps there.
k4w_distro() {
    local os_release id version
    os_release="$(k4w_path /etc/os-release)"
    [[ -r $os_release ]] || k4w_die "cannot read ${os_release}: unknown distribution"
    # shellcheck source=/dev/null  # os-release is data in shell syntax, read in a subshell.
    id="$(. "$os_release" && printf '%s' "${ID:-}")"
    # shellcheck source=/dev/null
    version="$(. "$os_release" && printf '%s' "${VERSION_ID:-}")"
    case "${id}-${version}" in
        ubuntu-16.04 | ubuntu-24.04 | ubuntu-26.04 | debian-12) printf '%s-%s\n' "$id" "$version" ;;
        *) k4w_die "unsupported distribution '${id} ${version}': k4w supports Ubuntu 16.04, 24.04 and 26.04 (boxes) and Debian 12 (CI)" ;;
    esac
}

# k4w_write_file PATH MODE CONTENT [OWNER] - write CONTENT plus a final newline, atomically,
# only when content, mode or owner differ. Sets K4W_CHANGED=1 when it wrote.
k4w_write_file() {
    local target mode content owner tmp
    target="$(k4w_path "$1")"
    mode="$2"
    content="$3"
    owner="${4:-root:root}"
    K4W_CHANGED=0
    if [[ -f $target ]] && printf '%s\n' "$content" | cmp -s - "$target"; then
        if [[ $(stat -c '%a' "$target") != "${mode#0}" ]]; then
            chmod "$mode" "$target"
            K4W_CHANGED=1
        fi
        if k4w_live && [[ $(stat -c '%U:%G' "$target") != "$owner" ]]; then
            chown "$owner" "$target"
            K4W_CHANGED=1
        fi
        return 0
    fi
    mkdir -p "$(dirname "$target")"
    tmp="$(mktemp "${target}.k4w-XXXXXX")"
    printf '%s\n' "$content" >"$tmp"
    chmod "$mode" "$tmp"
    if k4w_live; then chown "$owner" "$tmp"; fi
    mv -f "$tmp" "$target"
    K4W_CHANGED=1
    k4w_log "wrote $1"
}

# k4w_install_file SOURCE PATH MODE - copy a (binary) file into place when it differs.
k4w_install_file() {
    local source target mode tmp
    source="$1"
    target="$(k4w_path "$2")"
    mode="$3"
    K4W_CHANGED=0
    if [[ -f $target ]] && cmp -s "$source" "$target"; then
        if [[ $(stat -c '%a' "$target") != "${mode#0}" ]]; then
            chmod "$mode" "$target"
            K4W_CHANGED=1
        fi
        return 0
    fi
    mkdir -p "$(dirname "$target")"
    tmp="$(mktemp "${target}.k4w-XXXXXX")"
    cp "$source" "$tmp"
    chmod "$mode" "$tmp"
    mv -f "$tmp" "$target"
    K4W_CHANGED=1
    k4w_log "installed $2"
}

# k4w_remove_file PATH - delete a file k4w wrote earlier; K4W_CHANGED=1 if it existed.
k4w_remove_file() {
    local target
    target="$(k4w_path "$1")"
    K4W_CHANGED=0
    if [[ -e $target || -L $target ]]; then
        rm -f "$target"
        K4W_CHANGED=1
        k4w_log "removed $1"
    fi
}

k4w_sha256_of() {
    sha256sum "$1" | cut -d' ' -f1
}

k4w_is_sha256() {
    [[ $1 =~ ^[0-9a-f]{64}$ ]]
}

# k4w_fetch URL DEST - plain download through the proxy from the environment, for files
# verified by other means (a pinned GPG fingerprint). Box components never come this way: see
# k4w_component_file.
k4w_fetch() {
    # --retry: curl re-tries transient network errors itself (bounded, with back-off).
    curl --fail --silent --show-error --location --retry 3 --output "$2" "$1" ||
        k4w_die "download failed: $1 (check the proxy settings in cluster.yml)"
}

# The one verification routine for Linux guests: the digest's length picks the algorithm
# (64 hex digits: sha256; 128: sha512, as Kubernetes' release notes print for tarballs).
k4w_digest_of() {
    local file="$1" expected="$2"
    case ${#expected} in
        64) sha256sum "$file" | cut -d' ' -f1 ;;
        128) sha512sum "$file" | cut -d' ' -f1 ;;
        *) k4w_die "'${expected}' is neither a sha256 nor a sha512 hex digest" ;;
    esac
}
k4w_algorithm_of() {
    if ((${#1} == 128)); then echo sha512; else echo sha256; fi
}

# k4w_component_digest COMPONENT - the digest the profile pins for a component
# (K4W_<C>_SHA512, else K4W_<C>_SHA256; a user's `invoke pin` lands in the same variables).
k4w_component_digest() {
    local upper="${1^^}" digest
    k4w_require_one_of "K4W_${upper}_SHA512" "K4W_${upper}_SHA256"
    local sha512="K4W_${upper}_SHA512" sha256="K4W_${upper}_SHA256"
    digest="${!sha512:-${!sha256:-}}"
    [[ $digest =~ ^([0-9a-f]{64}|[0-9a-f]{128})$ ]] ||
        k4w_die "the checksum pinned for ${1} is not a sha256 or sha512 hex digest: '${digest}'"
    printf '%s\n' "$digest"
}

# k4w_component_file COMPONENT - print the path of a verified local copy of a box component.
# build-* fetched and verified it on the host and staged it where Packer's HTTP server serves it
# (OUT/http/<box>/components/<K4W_<C>_FILE>); this fetches it from there, never through the proxy
# (the server is the build host itself, which a corporate proxy cannot reach), and checks it
# again against the pinned digest before any step uses it. A verified copy from an earlier call
# is reused; a mismatch deletes the download and stops the build.
k4w_component_file() {
    local component="$1" upper file_var name expected target part actual
    k4w_require K4W_MEDIA_URL_PATH
    upper="${component^^}"
    file_var="K4W_${upper}_FILE"
    k4w_require "$file_var"
    name="${!file_var}"
    expected="$(k4w_component_digest "$component")"
    target="$(k4w_path "${K4W_CACHE}/components/${name}")"
    if [[ -f $target && $(k4w_digest_of "$target" "$expected") == "$expected" ]]; then
        printf '%s\n' "$target"
        return 0
    fi
    mkdir -p "$(dirname "$target")"
    part="${target}.part"
    k4w_build_host_copy "$name" "$part" "$component"
    actual="$(k4w_digest_of "$part" "$expected")"
    if [[ $actual != "$expected" ]]; then
        rm -f "$part"
        k4w_die "$(k4w_algorithm_of "$expected") mismatch for ${component} (${name} from the build host): expected ${expected}, got ${actual}"
    fi
    mv -f "$part" "$target"
    printf '%s\n' "$target"
}

# k4w_build_host_copy NAME DEST WHAT - copy NAME of the build media from Packer's HTTP server to DEST,
# never through the proxy (the server is the build host itself, which a corporate proxy cannot reach).
# The caller checks what it got: a component against its pinned digest, an image archive by its
# manifest digest once imported.
k4w_build_host_copy() {
    local name="$1" dest="$2" what="$3" url
    k4w_require K4W_MEDIA_URL_PATH
    # Packer sets PACKER_HTTP_ADDR (host:port of its HTTP server) for every shell provisioner.
    [[ -n ${PACKER_HTTP_ADDR:-} ]] ||
        k4w_die "${what}: no build file server (PACKER_HTTP_ADDR is unset): this step installs ${name} from the files build-* stages for Packer, so it only runs inside 'packer build'"
    # K4W_MEDIA_URL_PATH: /components/ where the server also serves preseed.cfg from OUT/http/<box>/,
    # / where it serves the build media folder alone (k4w.media.build_media.served_folder).
    url="http://${PACKER_HTTP_ADDR}${K4W_MEDIA_URL_PATH}${name}"
    k4w_log "copying ${name} from the build host (${url})" >&2
    curl --noproxy '*' --fail --silent --show-error --retry 3 --output "$dest" "$url" || {
        rm -f "$dest"
        k4w_die "${what}: could not copy ${url} from the build host: is ${name} staged in OUT/http/<box>/components/ (build-* does it), and does the host firewall admit Packer's HTTP port (invoke network-up)?"
    }
}

# k4w_image_digest CTR NAME - the manifest digest containerd's image NAME points at ("" when there is none).
# CTR: the ctr command with its --address and --namespace.
k4w_image_digest() {
    local -n ctr_command="$1"
    # `ctr images ls` prints REF TYPE DIGEST SIZE PLATFORMS LABELS (containerd v2.3.7
    # cmd/ctr/commands/images/images.go); the filter name==NAME matches the one image of that name.
    "${ctr_command[@]}" images ls "name==$2" | awk -v name="$2" 'NR > 1 && $1 == name { print $3 }'
}

# k4w_import_images CTR... - import each image of K4W_IMAGE_IMPORTS (<name>@<manifest digest>, blank-separated)
# from the build host (image-<48 hex>.tar, an OCI image layout k4w.bake.image_cache staged from the host's
# image cache), unless containerd already has NAME at that digest; then check NAME points at exactly
# the pinned digest. containerd checks every blob of the archive against its digest as it stores it
# (core/content/helpers.go WriteBlob commits with the expected digest), and the manifest digest names
# them all, so a swapped or damaged archive is refused either way. CTR: the ctr command line.
k4w_import_images() {
    local -a ctr=("$@")
    local entry name digest archive got
    for entry in ${K4W_IMAGE_IMPORTS:-}; do
        name="${entry%@*}"
        digest="${entry##*@}"
        [[ $digest =~ ^sha256:[0-9a-f]{64}$ && -n $name && $name != "$entry" ]] ||
            k4w_die "K4W_IMAGE_IMPORTS entry '${entry}' is not <image name>@sha256:<64 hex digits>"
        if [[ $(k4w_image_digest ctr "$name") == "$digest" ]]; then
            k4w_log "image ${name} already present at ${digest}"
            continue
        fi
        archive="$(mktemp --suffix=.tar)"
        # The archive's name: image-<the digest's first 48 hex digits>.tar (k4w/bake/image_cache.py archive_name).
        k4w_build_host_copy "image-${digest:7:48}.tar" "$archive" "image ${name}"
        # --platform: unpack the variant the archive holds for this node (linux/amd64), as a pull would.
        "${ctr[@]}" images import --platform linux/amd64 "$archive" >/dev/null ||
            { rm -f "$archive"; k4w_die "containerd refused the archive of ${name} from the build host"; }
        rm -f "$archive"
        got="$(k4w_image_digest ctr "$name")"
        if [[ $got != "$digest" ]]; then
            "${ctr[@]}" images rm "$name" >/dev/null 2>&1 || true
            k4w_die "image ${name} from the build host is ${got:-missing} after the import, not the pinned ${digest}: removed"
        fi
        k4w_log "image ${name} imported from the build host at ${digest}"
    done
}

# k4w_load_images - the Docker era's k4w_import_images: each image of K4W_IMAGE_IMPORTS (<name>@<manifest
# digest>) from the build host as the docker-save archive k4w.bake.image_cache.write_docker_archive staged,
# loaded with `docker load`. docker load keeps no manifest, so the archive carries the pinned one: it must
# hash to the digest, the loaded image's ID must be the config it names (Docker's image ID is the config's
# sha256: moby v17.03.2-ce image/fs.go), and load itself checks each layer against the config's DiffIDs
# (image/tarexport/load.go). The ID is recorded, so a second run needs no build host.
k4w_load_images() {
    local entry name digest archive manifest config got record
    for entry in ${K4W_IMAGE_IMPORTS:-}; do
        name="${entry%@*}"
        digest="${entry##*@}"
        [[ $digest =~ ^sha256:[0-9a-f]{64}$ && -n $name && $name != "$entry" ]] ||
            k4w_die "K4W_IMAGE_IMPORTS entry '${entry}' is not <image name>@sha256:<64 hex digits>"
        record="${K4W_STATE}/image-${digest:7}.id"
        if [[ -f $(k4w_path "$record") && $(docker image inspect --format '{{.Id}}' "$name" 2>/dev/null) == "$(cat "$(k4w_path "$record")")" ]]; then
            k4w_log "image ${name} already loaded from ${digest}"
            continue
        fi
        archive="$(mktemp --suffix=.tar)"
        manifest="$(mktemp)"
        k4w_build_host_copy "image-${digest:7:48}.tar" "$archive" "image ${name}"
        tar -xOf "$archive" "blobs/sha256/${digest:7}" >"$manifest" 2>/dev/null || true
        if [[ $(k4w_digest_of "$manifest" "${digest:7}") != "${digest:7}" ]]; then
            rm -f "$archive" "$manifest"
            k4w_die "the archive of ${name} from the build host does not hold the pinned manifest ${digest}: not loaded"
        fi
        # The manifest's config descriptor: {"mediaType": ..., "digest": "sha256:...", "size": ...} (no nesting).
        config="$(tr -d ' \t\r\n' <"$manifest" | sed -n 's/.*"config":{[^}]*"digest":"\(sha256:[0-9a-f]\{64\}\)".*/\1/p')"
        rm -f "$manifest"
        [[ -n $config ]] || { rm -f "$archive"; k4w_die "the pinned manifest of ${name} names no sha256 config"; }
        docker load --input "$archive" >/dev/null || { rm -f "$archive"; k4w_die "docker refused the archive of ${name} from the build host"; }
        rm -f "$archive"
        got="$(docker image inspect --format '{{.Id}}' "$name" 2>/dev/null || true)"
        if [[ $got != "$config" ]]; then
            docker image rm "$name" >/dev/null 2>&1 || true
            k4w_die "image ${name} from the build host is ${got:-missing} after docker load, not the config ${config} of the pinned ${digest}: removed"
        fi
        k4w_write_file "$record" 0644 "$config"
        k4w_log "image ${name} loaded from the build host: manifest ${digest}, image ID ${config}"
    done
}

# k4w_installed_from NAME SOURCE - true when the files recorded for NAME were installed from
# SOURCE (a digest and a file name) and are still byte for byte what was installed, so a second
# run proves an install complete from the disk and needs no build host.
k4w_installed_from() {
    local record source
    record="$(k4w_path "${K4W_STATE}/${1}.sha256sums")"
    source="$(k4w_path "${K4W_STATE}/${1}.source")"
    [[ -f $record && -f $source && $(cat "$source") == "$2" ]] && sha256sum --check --quiet --status "$record"
}

# k4w_record_install NAME SOURCE RECORD - keep what k4w_installed_from checks (RECORD: sha256sum
# lines of the installed files).
k4w_record_install() {
    [[ -n $3 ]] || k4w_die "nothing was installed for $1"
    k4w_write_file "${K4W_STATE}/${1}.sha256sums" 0644 "${3%$'\n'}"
    k4w_write_file "${K4W_STATE}/${1}.source" 0644 "$2"
}

# k4w_install_node_binaries DIGEST BIN_DIR - kubeadm, kubelet and kubectl from the Kubernetes node
# tarball (component kubernetes; kubernetes/node/bin/ inside) into BIN_DIR, recorded so a second run
# needs no build host. Sets K4W_CHANGED=1 when the kubelet binary changed (a joined node restarts it).
K4W_NODE_BINARIES=(kubeadm kubelet kubectl)
k4w_install_node_binaries() {
    local digest="$1" bin_dir="$2" source node_tarball unpacked record="" name kubelet_changed=0
    k4w_require K4W_KUBERNETES_FILE K4W_KUBERNETES_VERSION
    source="${digest} ${K4W_KUBERNETES_FILE}"
    if k4w_installed_from kubernetes-node "$source"; then
        k4w_log "kubeadm, kubelet and kubectl v${K4W_KUBERNETES_VERSION} already installed in ${bin_dir}"
        K4W_CHANGED=0
        return 0
    fi
    node_tarball="$(k4w_component_file kubernetes)"
    unpacked="$(mktemp -d)"
    tar -xzf "$node_tarball" -C "$unpacked" "${K4W_NODE_BINARIES[@]/#/kubernetes/node/bin/}"
    for name in "${K4W_NODE_BINARIES[@]}"; do
        k4w_install_file "${unpacked}/kubernetes/node/bin/${name}" "${bin_dir}/${name}" 0755
        if [[ $name == kubelet ]] && ((K4W_CHANGED)); then kubelet_changed=1; fi
        record+="$(k4w_sha256_of "${unpacked}/kubernetes/node/bin/${name}")  $(k4w_path "${bin_dir}/${name}")"$'\n'
    done
    rm -rf "$unpacked"
    k4w_record_install kubernetes-node "$source" "$record"
    K4W_CHANGED=$kubelet_changed
}

# k4w_install_kubelet_service BIN_DIR ERA KUBELET_BINARY_CHANGED - the kubelet unit and kubeadm's
# drop-in, the layout Kubernetes' own packages install (the binary in BIN_DIR), enabled but not
# started: kubeadm init/join write kubeadm-flags.env and start it. /etc/default/kubelet is where
# cluster-up puts KUBELET_EXTRA_ARGS (e.g. --node-ip). A joined node whose kubelet binary
# (KUBELET_BINARY_CHANGED=1) or units changed is restarted. ERA names whose packaging the unit follows:
# 1.11  - Kubernetes' build/debs for kubeadm 1.11 (the seed recipe);
# krel  - kubernetes/release cmd/krel/templates/latest/kubelet/kubelet.service and
#         kubeadm/10-kubeadm.conf at f618b2a308bc (the containerd-era recipe), which waits for
#         network-online.target.
k4w_install_kubelet_service() {
    local bin_dir="$1" era="$2" binary_changed="$3" unit_note drop_in_note documentation ordering=""
    local units_changed=0
    case "$era" in
        1.11)
            unit_note="layout of Kubernetes' kubelet.service"
            drop_in_note="kubeadm and kubelet v1.11+"
            documentation=https://kubernetes.io/docs/home/
            ;;
        krel)
            unit_note="Kubernetes' kubelet.service of this era"
            drop_in_note="Kubernetes' 10-kubeadm.conf of this era"
            documentation=https://kubernetes.io/docs/
            ordering=$'\nWants=network-online.target\nAfter=network-online.target'
            ;;
        *) k4w_die "k4w_install_kubelet_service: unknown era '${era}' (1.11 or krel)" ;;
    esac
    k4w_write_file /etc/systemd/system/kubelet.service 0644 "# k4w: kubelet for kubeadm (${unit_note})
[Unit]
Description=kubelet: The Kubernetes Node Agent
Documentation=${documentation}${ordering}

[Service]
ExecStart=${bin_dir}/kubelet
Restart=always
StartLimitInterval=0
RestartSec=10

[Install]
WantedBy=multi-user.target"
    ((K4W_CHANGED)) && units_changed=1
    k4w_write_file /etc/systemd/system/kubelet.service.d/10-kubeadm.conf 0644 "# k4w: kubeadm's kubelet drop-in (${drop_in_note})
[Service]
Environment=\"KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf\"
Environment=\"KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml\"
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
EnvironmentFile=-/etc/default/kubelet
ExecStart=
ExecStart=${bin_dir}/kubelet \$KUBELET_KUBECONFIG_ARGS \$KUBELET_CONFIG_ARGS \$KUBELET_KUBEADM_ARGS \$KUBELET_EXTRA_ARGS"
    ((K4W_CHANGED)) && units_changed=1
    if ((units_changed)); then k4w_systemctl daemon-reload; fi
    # Enabled, not started: until kubeadm init/join writes its config the kubelet cannot run.
    k4w_enable kubelet
    # Only a node that already joined runs the kubelet; it must pick up a new binary or unit.
    if ((units_changed || binary_changed)) && k4w_unit_active kubelet; then
        systemctl restart kubelet
    fi
    K4W_CHANGED=$units_changed
}

# k4w_wait_for DESCRIPTION TIMEOUT_SECONDS COMMAND... - poll COMMAND once a second until it
# succeeds; fail with DESCRIPTION when the timeout expires. For readiness, never a fixed sleep.
k4w_wait_for() {
    local what="$1" timeout="$2" start
    shift 2
    start=$SECONDS
    until "$@" >/dev/null 2>&1; do
        if ((SECONDS - start >= timeout)); then
            k4w_die "timed out after ${timeout}s waiting for ${what}"
        fi
        sleep 1
    done
}

# k4w_env_file_line NAME=VALUE - the pair as a line of a systemd EnvironmentFile=, VALUE in double
# quotes. systemd's parser (src/basic/fileio.c at v229 for xenial, src/basic/env-file.c at v255)
# takes every character inside "..." literally but `"` and `\`, whose escapes differ between those
# versions, and expands neither %-specifiers nor $VARIABLES there: URL-encoded credentials (%40)
# and a `$` stay as they are. A URL holds neither `"` nor `\` (RFC 3986 percent-encodes both), so
# a value with one is refused rather than escaped.
k4w_env_file_line() {
    local name="${1%%=*}" value="${1#*=}"
    [[ $value != *[\"\\]* ]] ||
        k4w_die "the value of ${name} holds a double quote or a backslash: percent-encode it (%22, %5C) in cluster.yml"
    printf '%s="%s"' "$name" "$value"
}

k4w_systemctl() {
    if k4w_live; then
        systemctl "$@"
    else
        k4w_log "sandbox: skipped 'systemctl $*'"
    fi
}

k4w_unit_active() {
    k4w_live && systemctl is-active --quiet "$1"
}

# k4w_enable UNIT - enable once; a second run finds it enabled and does nothing.
k4w_enable() {
    if k4w_live && ! systemctl is-enabled --quiet "$1"; then
        systemctl enable "$1"
    fi
}

# k4w_package_version PACKAGE - the installed version, empty when not installed.
k4w_package_version() {
    # dpkg-query fails for a package it has never seen: that is "not installed", not an error.
    # "hi" is installed and held (apt-mark hold, as step 03 does for docker): still installed.
    { dpkg-query --show --showformat='${db:Status-Abbrev} ${Version}\n' "$1" 2>/dev/null || true; } |
        awk '$1 == "ii" || $1 == "hi" { print $2 }'
}

# k4w_apt_install PACKAGE[=VERSION]... - install only what is missing or at another version,
# so a second run calls neither apt-get update nor install.
k4w_apt_install() {
    local spec name version missing=()
    for spec in "$@"; do
        name="${spec%%=*}"
        version=""
        [[ $spec == *=* ]] && version="${spec#*=}"
        local installed
        installed="$(k4w_package_version "$name")"
        if [[ -z $installed || (-n $version && $installed != "$version") ]]; then
            missing+=("$spec")
        fi
    done
    ((${#missing[@]} == 0)) && return 0
    if ! k4w_live; then
        k4w_log "sandbox: skipped 'apt-get install ${missing[*]}'"
        return 0
    fi
    k4w_apt_update
    k4w_log "installing ${missing[*]}"
    # --force-confold: keep configuration files k4w already wrote (e.g. /etc/docker/daemon.json).
    DEBIAN_FRONTEND=noninteractive k4w_apt apt-get install --yes --no-install-recommends \
        --allow-downgrades -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "${missing[@]}"
}

k4w_apt_update() {
    if ((K4W_APT_UPDATED == 0)); then
        k4w_apt apt-get update
        K4W_APT_UPDATED=1
    fi
}

# k4w_hold PACKAGE - keep apt from upgrading a pinned package.
k4w_hold() {
    k4w_live || return 0
    if ! apt-mark showhold | grep -qx "$1"; then
        k4w_apt apt-mark hold "$1"
    fi
}

# --- what the kubelet, kube-proxy and Flannel need from the kernel ---------------------------
# br_netfilter and overlay loaded at boot: bridged pod traffic must traverse iptables (Flannel,
# kube-proxy; the net.bridge.* sysctls exist only with br_netfilter loaded), and Docker's overlay2
# storage driver needs overlay.
K4W_KERNEL_MODULES=(br_netfilter overlay)
K4W_MODULES_FILE=/etc/modules-load.d/k4w-kubernetes.conf
K4W_SYSCTL_FILE=/etc/sysctl.d/90-k4w-kubernetes.conf
declare -gA K4W_SYSCTLS=(
    # A kubeadm preflight check, and bridged pod traffic through iptables (Flannel, kube-proxy).
    [net.ipv4.ip_forward]=1
    [net.bridge.bridge-nf-call-iptables]=1
    # The kernel tunables a kubelet with protectKernelDefaults (the containerd era's KubeletConfiguration)
    # requires as they are, or it refuses to start: setupKernelTunables in k8s.io/kubernetes@v1.37.2
    # pkg/kubelet/cm/container_manager_linux.go, values from k8s.io/component-helpers@v0.37.2
    # node/util/sysctl/sysctl.go. Set on every node: harmless where the kubelet does not check them.
    [vm.overcommit_memory]=1
    [vm.panic_on_oom]=0
    [kernel.panic]=10
    [kernel.panic_on_oops]=1
    [kernel.keys.root_maxkeys]=1000000
    [kernel.keys.root_maxbytes]=25000000
)

# k4w_kernel_tunables - the modules and sysctls above, in files the boot applies (systemd-modules-load,
# systemd-sysctl) and, live, in the running kernel. Bake step 02 calls it, and so does every cluster
# script before it starts a kubelet: a box baked before a tunable was added keeps the kernel's default
# across cluster-reset and reboots, and a kubelet with protectKernelDefaults would exit on it.
# Idempotent: files are written and values set only where they differ.
k4w_kernel_tunables() {
    local module key lines="# k4w: forwarding and bridged traffic for kubeadm, Flannel and kube-proxy; the kubelet's kernel defaults"
    k4w_write_file "$K4W_MODULES_FILE" 0644 "# k4w: loaded at boot for Kubernetes networking and Docker overlay2
$(printf '%s\n' "${K4W_KERNEL_MODULES[@]}")"
    for key in $(printf '%s\n' "${!K4W_SYSCTLS[@]}" | sort); do
        lines+=$'\n'"${key} = ${K4W_SYSCTLS[$key]}"
    done
    k4w_write_file "$K4W_SYSCTL_FILE" 0644 "$lines"
    k4w_live || return 0
    for module in "${K4W_KERNEL_MODULES[@]}"; do
        if [[ ! -d /sys/module/${module} ]]; then
            k4w_log "loading kernel module ${module}"
            modprobe "$module"
        fi
    done
    for key in "${!K4W_SYSCTLS[@]}"; do
        if [[ $(sysctl -n "$key") != "${K4W_SYSCTLS[$key]}" ]]; then
            k4w_log "setting ${key} = ${K4W_SYSCTLS[$key]}"
            sysctl -q -w "${key}=${K4W_SYSCTLS[$key]}"
        fi
    done
}

# --- apt on a box that may still be booting for the first time -------------------------------
# A fresh install's first boot runs cloud-init (24.04/26.04: subiquity's installed system) and
# apt's daily timers (apt-daily, apt-daily-upgrade: unattended-upgrades), which hold apt's and
# dpkg's locks; an apt-get that meets a held lock fails at once unless told to wait. Every apt
# command of the guest steps goes through k4w_apt (invoke validate's apt rule holds them to it).
# Bounds, in seconds: cloud-init's first boot; apt's daily jobs; one held lock.
K4W_FIRST_BOOT_TIMEOUT=900
K4W_APT_JOBS_TIMEOUT=900
K4W_APT_LOCK_TIMEOUT=300
# Between two tries of an apt command that met a held lock.
K4W_APT_RETRY_SECONDS=5
# The systemd units of apt's daily jobs (apt's debian/apt-daily*.service). unattended-upgrades.service
# is left out: it only waits for shutdown, so it is active all the time.
K4W_APT_JOB_UNITS=(apt-daily.service apt-daily-upgrade.service)
K4W_FIRST_BOOT_WAITED=0

# Idle when every job unit is inactive or failed. Both are Type=oneshot, so a job that runs is
# "activating" (until its ExecStart exits), which `systemctl is-active` counts as not active. The
# other states (active, reloading, deactivating; later systemd adds maintenance and refreshing:
# unit_active_state_table, src/basic/unit-name.c at systemd v229, src/basic/unit-def.c since) count
# as busy. The state is read as `ActiveState=` text: systemd v229 (Ubuntu 16.04) has no --value.
k4w_apt_jobs_idle() {
    local shown
    shown="$(systemctl show -p ActiveState "${K4W_APT_JOB_UNITS[@]}")" || return 1
    [[ -n $shown ]] && ! grep -v -x -E 'ActiveState=(inactive|failed)|' <<<"$shown" >/dev/null
}

# k4w_wait_first_boot - once per step: wait, bounded, for cloud-init to finish where it is installed
# and runs, then for apt's daily jobs.
k4w_wait_first_boot() {
    ((K4W_FIRST_BOOT_WAITED)) && return 0
    K4W_FIRST_BOOT_WAITED=1
    k4w_live || return 0
    local status rc=0
    if command -v cloud-init >/dev/null 2>&1; then
        status="$(cloud-init status 2>/dev/null | awk '$1 == "status:" { print $2 }' || true)"
        # "disabled": nothing runs; "not" (not run): the steps run over SSH, which cloud-init's
        # network stage precedes (its cloud-init.service is ordered Before=sshd.service), so a
        # cloud-init that has not run by now never will on this boot.
        if [[ -n $status && $status != disabled && $status != not ]]; then
            k4w_log "waiting for cloud-init to finish its first boot (status ${status}; at most ${K4W_FIRST_BOOT_TIMEOUT}s)"
            timeout "$K4W_FIRST_BOOT_TIMEOUT" cloud-init status --wait >/dev/null 2>&1 || rc=$?
            # 124: timeout(1) stopped the wait. 1 or 2: cloud-init finished with errors, which are
            # not apt's business; the locks are free either way.
            ((rc != 124)) || k4w_die "cloud-init was still running after ${K4W_FIRST_BOOT_TIMEOUT}s; see 'cloud-init status --long' on the VM"
        fi
    fi
    k4w_wait_for "apt's daily jobs (${K4W_APT_JOB_UNITS[*]}) to finish" "$K4W_APT_JOBS_TIMEOUT" k4w_apt_jobs_idle
}

# k4w_apt apt-get|apt-mark ARGS... - run an apt command that takes apt's or dpkg's locks, after the
# first boot's jobs, waiting a bounded time for a lock someone else holds:
# - DPkg::Lock::Timeout makes apt wait for dpkg's locks itself (apt 1.9.11 and later:
#   apt-pkg/deb/debsystem.cc, debSystem::Lock, Debian/apt@1.9.11). apt 1.2 (Ubuntu 16.04) has no
#   such option and ignores it, as every -o item it does not know (apt-pkg/contrib/cmndline.cc,
#   ArbItem, Debian/apt@1.2.35);
# - neither waits for the lists lock of apt-get update (apt-pkg/acquire.cc, pkgAcquire::GetLock,
#   Debian/apt@3.1.12): a failure that names a lock is tried again until the same bound.
k4w_apt() {
    k4w_wait_first_boot
    local errors rc start=$SECONDS
    errors="$(mktemp)"
    while :; do
        rc=0
        "$1" -o "DPkg::Lock::Timeout=${K4W_APT_LOCK_TIMEOUT}" "${@:2}" 2>"$errors" || rc=$?
        cat "$errors" >&2
        if ((rc == 0)) || ! grep -qiE 'could not get lock|unable to lock|unable to acquire the dpkg frontend lock' "$errors"; then
            break
        fi
        if ((SECONDS - start >= K4W_APT_LOCK_TIMEOUT)); then
            k4w_log "an apt lock was still held after ${K4W_APT_LOCK_TIMEOUT}s: giving up"
            break
        fi
        k4w_log "an apt lock is held by another process: trying '$1 ${2:-}' again"
        sleep "$K4W_APT_RETRY_SECONDS"
    done
    rm -f "$errors"
    return "$rc"
}

# --- proxy ---------------------------------------------------------------------------------
# k4w_configure_registry FILES AUTH_BASE64 SCOPE - containerd's image mirrors (k4w/derive/registry.py).
# FILES: blank-separated "<host folder>/<file>=<base64>" entries, the certs.d tree k4w.derive.registry
# renders (hosts.toml and the mirror's ca.crt beside it); empty = no mirror. AUTH_BASE64: the
# credentials drop-in the CRI plugin imports (registry.configs.<mirror>.auth), base64; empty =
# none. SCOPE, as k4w_configure_proxy's: build (bake; the credentials in /run, gone with the build
# VM, so a box carries none) or node (cluster-up; in /etc/containerd/conf.d, for good). Either
# scope removes the other's credentials. Folders of K4W_REGISTRY_HOSTS_DIR whose hosts.toml k4w
# wrote (its first line is K4W_REGISTRY_MARKER) and that FILES no longer names are removed; a
# folder someone else wrote is left alone. Sets K4W_REGISTRY_AUTH_CHANGED=1 when the credentials
# file changed: containerd reads its config (and so the drop-in) at start only, while it reads
# hosts.toml at every pull (docs/hosts.md: "Updates under this directory do not require
# restarting the containerd daemon").
# containerd's config_path on Linux (plugins/cri/images/plugin.go's default at v2.3.7, set
# explicitly in config.toml by 03-containerd.sh).
K4W_REGISTRY_HOSTS_DIR=/etc/containerd/certs.d
K4W_REGISTRY_MARKER="# k4w: written from cluster.yml registry.mirrors"
# The drop-ins config.toml imports (03-containerd.sh), one per scope.
K4W_REGISTRY_AUTH_NODE=/etc/containerd/conf.d/k4w-registry-auth.toml
K4W_REGISTRY_AUTH_BUILD=/run/k4w/containerd/k4w-registry-auth.toml

k4w_configure_registry() {
    local files="$1" auth="$2" scope="$3" entry path folder name entries=() wanted=() dir hosts_file first
    [[ $scope == node || $scope == build ]] || k4w_die "the registry scope must be node or build, not '${scope}'"
    read -r -a entries <<<"$files"
    for entry in ${entries[@]+"${entries[@]}"}; do
        path="${entry%%=*}"
        folder="${path%/*}"
        name="${path##*/}"
        # A folder is a registry host (host_port_); a file is hosts.toml or ca.crt (k4w/derive/registry.py).
        [[ $path == */* && $folder =~ ^[A-Za-z0-9][A-Za-z0-9._-]*$ && ($name == hosts.toml || $name == ca.crt) ]] ||
            k4w_die "K4W_REGISTRY_FILES holds '${path}', which is not <registry host>/hosts.toml or ca.crt"
        k4w_write_file "${K4W_REGISTRY_HOSTS_DIR}/${path}" 0644 "$(printf '%s' "${entry#*=}" | base64 -d)"
        wanted+=("$folder")
    done
    dir="$(k4w_path "$K4W_REGISTRY_HOSTS_DIR")"
    if [[ -d $dir ]]; then
        for hosts_file in "$dir"/*/hosts.toml; do
            [[ -f $hosts_file ]] || continue
            folder="$(basename "$(dirname "$hosts_file")")"
            [[ " ${wanted[*]-} " == *" ${folder} "* ]] && continue
            IFS= read -r first <"$hosts_file" || true
            if [[ $first == "$K4W_REGISTRY_MARKER" ]]; then
                rm -rf "${dir:?}/${folder}"
                k4w_log "removed the mirror of ${folder} (no longer in cluster.yml)"
            fi
        done
    fi

    local keep="$K4W_REGISTRY_AUTH_NODE" drop="$K4W_REGISTRY_AUTH_BUILD"
    [[ $scope == build ]] && keep="$K4W_REGISTRY_AUTH_BUILD" drop="$K4W_REGISTRY_AUTH_NODE"
    K4W_REGISTRY_AUTH_CHANGED=0
    k4w_remove_file "$drop"
    ((K4W_CHANGED)) && K4W_REGISTRY_AUTH_CHANGED=1
    if [[ -n $auth ]]; then
        # 0600 root: the file holds the mirrors' passwords (containerd runs as root).
        k4w_write_file "$keep" 0600 "$(printf '%s' "$auth" | base64 -d)"
    else
        k4w_remove_file "$keep"
    fi
    ((K4W_CHANGED)) && K4W_REGISTRY_AUTH_CHANGED=1
    return 0
}

# k4w_configure_proxy PROXY_ENV APT_PROXY_CONF FILE_MODE SCOPE - give the proxy to everything
# that downloads. PROXY_ENV is the blank-separated NAME=value pairs k4w.derive.values computes
# (cluster.yml allows no blank in a proxy URL or NO_PROXY entry); FILE_MODE is 0600 when a URL
# carries credentials. Empty PROXY_ENV and APT_PROXY_CONF mean no proxy. SCOPE:
# - node (cluster-up, guest/ubuntu/cluster/cluster-proxy.sh): on disk, for good - login sessions
#   (/etc/environment), apt, and the docker and kubelet services (drop-ins in /etc/systemd).
# - build (bake step 01): nothing on disk, so a box never carries the build's proxy or its
#   credentials. The steps get the proxy in their environment from Packer (apt reads
#   http_proxy/https_proxy there); docker, which pulls images during the build, gets a runtime
#   drop-in in /run/systemd, which is gone when the build VM shuts down.
# Either scope removes what the other wrote, and the installer's apt proxy line (preseed.cfg's
# mirror/http/proxy, credentials included). A running service whose drop-in changed restarts.
K4W_ENVIRONMENT_FILE=/etc/environment
K4W_APT_PROXY_FILE=/etc/apt/apt.conf.d/90k4w-proxy
# debian-installer writes mirror/http/proxy here; k4w's own file above replaces it.
K4W_INSTALLER_APT_CONF=/etc/apt/apt.conf
# subiquity's autoinstall `proxy:` reaches the installed system twice: curtin's apt proxy file
# (curtin/commands/apt_config.py APT_PROXY_FN) and subiquity's snapd drop-in
# (subiquity/models/proxy.py at 24.04.4). Both may hold credentials; k4w owns the proxy instead.
K4W_INSTALLER_PROXY_FILES=(/etc/apt/apt.conf.d/90curtin-aptproxy /etc/systemd/system/snapd.service.d/snap_proxy.conf)
# The services that download on a node: the container runtime of either era (docker, containerd)
# and the kubelet; a drop-in for a unit a node does not have is inert. During a build only the
# runtime the box installs pulls images: K4W_CONTAINER_RUNTIME (docker or containerd, derived from
# the profile's components by k4w/derive/step_env.py).
K4W_PROXY_SERVICES=(docker containerd kubelet)
# The services' proxy variables, under /etc (node) or /run (build): K4W_PROXY_SERVICE_ENV below.
K4W_PROXY_SERVICE_ENV=/k4w/proxy.env

k4w_configure_proxy() {
    local proxy_env="$1" apt_conf="$2" mode="$3" scope="$4" pair proxy_vars=() changed=() service
    [[ $mode =~ ^0[0-7]{3}$ ]] || k4w_die "the proxy file mode must be a mode such as 0600, not '${mode}'"
    [[ $scope == node || $scope == build ]] || k4w_die "the proxy scope must be node or build, not '${scope}'"
    local build_services=()
    if [[ $scope == build ]]; then
        k4w_require K4W_CONTAINER_RUNTIME
        [[ " ${K4W_PROXY_SERVICES[*]} " == *" ${K4W_CONTAINER_RUNTIME} "* && $K4W_CONTAINER_RUNTIME != kubelet ]] ||
            k4w_die "K4W_CONTAINER_RUNTIME must be docker or containerd, not '${K4W_CONTAINER_RUNTIME}'"
        build_services=("$K4W_CONTAINER_RUNTIME")
    fi
    read -r -a proxy_vars <<<"$proxy_env"
    # ${a[@]+...}: xenial's bash 4.3 calls an empty array unbound under `set -u`.
    for pair in ${proxy_vars[@]+"${proxy_vars[@]}"}; do
        # The name only: the value may carry credentials.
        [[ $pair =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || k4w_die "the proxy environment holds '${pair%%=*}', which is not a NAME=value pair"
        k4w_env_file_line "$pair" >/dev/null  # refused here, before anything is written
    done
    local persistent=()
    [[ $scope == node ]] && persistent=(${proxy_vars[@]+"${proxy_vars[@]}"})

    # /etc/environment: keep every other line, replace the proxy variables. pam_env reads it as
    # root, so mode 0600 still reaches every login while hiding credentials from other users.
    local current="" kept
    [[ -f $(k4w_path "$K4W_ENVIRONMENT_FILE") ]] && current="$(cat "$(k4w_path "$K4W_ENVIRONMENT_FILE")")"
    kept="$(printf '%s\n' "$current" | grep -Eiv '^[[:space:]]*(export[[:space:]]+)?(http|https|no)_proxy=' | sed '/^$/d' || true)"
    for pair in ${persistent[@]+"${persistent[@]}"}; do
        kept+="${kept:+$'\n'}${pair%%=*}=\"${pair#*=}\""
    done
    if [[ -z $kept ]]; then
        k4w_remove_file "$K4W_ENVIRONMENT_FILE"
    elif ((${#persistent[@]} > 0)); then
        k4w_write_file "$K4W_ENVIRONMENT_FILE" "$mode" "$kept"
    elif [[ $kept != "$current" ]]; then
        k4w_write_file "$K4W_ENVIRONMENT_FILE" 0644 "$kept"
    fi

    # apt: k4w's own file on a node; never the installer's copy of mirror/http/proxy.
    if [[ $scope == node && -n $apt_conf ]]; then
        k4w_write_file "$K4W_APT_PROXY_FILE" "$mode" "$apt_conf"
    else
        k4w_remove_file "$K4W_APT_PROXY_FILE"
    fi
    local installer rest
    installer="$(k4w_path "$K4W_INSTALLER_APT_CONF")"
    if [[ -f $installer ]] && grep -q '^Acquire::http::Proxy ' "$installer"; then
        rest="$(grep -v '^Acquire::http::Proxy ' "$installer" | sed '/^[[:space:]]*$/d' || true)"
        if [[ -z $rest ]]; then
            k4w_remove_file "$K4W_INSTALLER_APT_CONF"
        else
            k4w_write_file "$K4W_INSTALLER_APT_CONF" 0644 "$rest"
        fi
    fi

    local leftover
    for leftover in "${K4W_INSTALLER_PROXY_FILES[@]}"; do
        k4w_remove_file "$leftover"
        if ((K4W_CHANGED)) && [[ $leftover == */systemd/* ]]; then
            changed+=(snapd)
        fi
    done

    # The services' proxy: one root-only EnvironmentFile (in /etc on a node, in /run during a build)
    # and a drop-in per service that names it. Never Environment= in a unit: any local user reads
    # those over D-Bus (`systemctl show -p Environment`; systemd.exec(5), Environment=), while
    # systemd reads an EnvironmentFile= itself, as root, when it starts the service.
    local path content wanted dir env_file env_changed=0
    for dir in /etc /run; do
        env_file="${dir}${K4W_PROXY_SERVICE_ENV}"
        if ((${#proxy_vars[@]} > 0)) && [[ ($scope == node && $dir == /etc) || ($scope == build && $dir == /run) ]]; then
            content="# k4w: proxy from cluster.yml for ${K4W_PROXY_SERVICES[*]} (${scope}), read by systemd as root"
            for pair in "${proxy_vars[@]}"; do
                content+=$'\n'"$(k4w_env_file_line "$pair")"
            done
            # 0600 root whatever FILE_MODE says: only systemd reads it.
            k4w_write_file "$env_file" 0600 "$content"
        else
            k4w_remove_file "$env_file"
        fi
        ((K4W_CHANGED)) && env_changed=1
    done
    for service in "${K4W_PROXY_SERVICES[@]}"; do
        for dir in /etc/systemd/system /run/systemd/system; do
            path="${dir}/${service}.service.d/http-proxy.conf"
            wanted=0
            if ((${#proxy_vars[@]} > 0)); then
                if [[ $scope == node && $dir == /etc/* ]]; then
                    wanted=1
                elif [[ $scope == build && $dir == /run/* && " ${build_services[*]-} " == *" ${service} "* ]]; then
                    wanted=1
                fi
            fi
            if ((wanted)); then
                env_file="${dir%%/systemd/system}${K4W_PROXY_SERVICE_ENV}"
                content="# k4w: proxy from cluster.yml for ${service} (${scope}); the values are in ${env_file} (root only)"
                content+=$'\n'"[Service]"$'\n'"EnvironmentFile=${env_file}"
                k4w_write_file "$path" 0644 "$content"
            else
                k4w_remove_file "$path"
            fi
            # A changed value file restarts every service that reads it.
            if ((K4W_CHANGED || (wanted && env_changed))) && [[ " ${changed[*]-} " != *" ${service} "* ]]; then
                changed+=("$service")
            fi
        done
    done
    if ((${#changed[@]} > 0)); then
        k4w_systemctl daemon-reload
        for service in "${changed[@]}"; do
            # A running service reads its EnvironmentFile= again only at a restart; a stopped one at start.
            if k4w_unit_active "$service"; then
                k4w_log "restarting ${service} for the new proxy settings"
                systemctl restart "$service"
            fi
        done
    fi

    if ((${#proxy_vars[@]} > 0)); then
        # Names only, never the URLs: they may carry credentials.
        k4w_log "proxy configured for the ${scope}: ${proxy_vars[*]%%=*}"
    else
        k4w_log "no proxy configured; k4w proxy settings absent"
    fi
}
