#!/usr/bin/env bash
# Step 1: the build's proxy, without putting it on disk (k4w_configure_proxy in lib.sh, scope
# build): the steps get it in their environment from Packer, docker gets a runtime drop-in in
# /run that is gone when the build VM shuts down. So a box never carries the build's proxy or
# its credentials; cluster-up gives each node the proxy of the cluster.yml it is brought up with.
#
# Env (every value computed by k4w.derive.values from cluster.yml; each may be empty, all must be set):
# K4W_PROXY_ENV - the NAME=value pairs every downloader understands (HTTP_PROXY, https_proxy,
#   NO_PROXY, ...; https is never copied from http), blank-separated: cluster.yml allows no blank
#   in a proxy URL or NO_PROXY entry. Empty = no proxy.
# K4W_APT_PROXY_CONF - the text of apt's proxy file (for a preseed box the same its late_command wrote).
# K4W_PROXY_FILE_MODE - the mode of the files that carry the proxy URLs (0600 with credentials).
K4W_STEP="01-proxy"
set -Eeuo pipefail
trap 'echo "k4w ${K4W_STEP}: ${BASH_SOURCE[0]##*/} line ${LINENO}: \"${BASH_COMMAND}\" exited $?" >&2' ERR
K4W_LIB="${K4W_LIB:-$(dirname "${BASH_SOURCE[0]}")/../lib.sh}"
[[ -r $K4W_LIB ]] || { echo "k4w ${K4W_STEP}: library ${K4W_LIB} not found (Packer uploads guest/ubuntu/lib.sh there)" >&2; exit 1; }
# shellcheck source=../lib.sh
source "$K4W_LIB"

k4w_require_defined K4W_PROXY_ENV K4W_APT_PROXY_CONF
k4w_require K4W_PROXY_FILE_MODE
k4w_distro >/dev/null
[[ $K4W_PROXY_FILE_MODE =~ ^0[0-7]{3}$ ]] || k4w_die "K4W_PROXY_FILE_MODE must be a file mode such as 0600, not '${K4W_PROXY_FILE_MODE}'"
k4w_configure_proxy "$K4W_PROXY_ENV" "$K4W_APT_PROXY_CONF" "$K4W_PROXY_FILE_MODE" build
