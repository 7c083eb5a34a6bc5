#!/usr/bin/env bash
# Step 1: the proxy reaches every place that downloads - login shells (/etc/environment), apt,
# and the docker and kubelet services (systemd drop-ins). Without a proxy, every file this
# step may have written before is removed, so a box never carries a stale proxy.
#
# Env: K4W_HTTP_PROXY, K4W_HTTPS_PROXY (https is never copied from http), K4W_NO_PROXY (the
# list derived in k4w.derive: cluster CIDRs, node IPs and names, API address, domain).
# Each may be empty; all three must be set.
K4W_STEP="01-proxy"
set -Eeuo pipefail
trap 'echo "k4w ${K4W_STEP}: ${BASH_SOURCE[0]##*/} line ${LINENO}: \"${BASH_COMMAND}\" exited $?" >&2' ERR
K4W_LIB="${K4W_LIB:-$(dirname "${BASH_SOURCE[0]}")/../lib.sh}"
[[ -r $K4W_LIB ]] || { echo "k4w ${K4W_STEP}: library ${K4W_LIB} not found (Packer uploads guest/ubuntu/lib.sh there)" >&2; exit 1; }
# shellcheck source=../lib.sh
source "$K4W_LIB"

ENVIRONMENT_FILE=/etc/environment
APT_PROXY_FILE=/etc/apt/apt.conf.d/90k4w-proxy
# debian-installer writes mirror/http/proxy here; k4w's own file above replaces it.
INSTALLER_APT_CONF=/etc/apt/apt.conf
PROXY_SERVICES=(docker kubelet)

k4w_require_defined K4W_HTTP_PROXY K4W_HTTPS_PROXY K4W_NO_PROXY
k4w_distro >/dev/null
k4w_validate_proxy_url K4W_HTTP_PROXY "$K4W_HTTP_PROXY"
k4w_validate_proxy_url K4W_HTTPS_PROXY "$K4W_HTTPS_PROXY"
if [[ $K4W_NO_PROXY =~ [[:space:]\"\'\\] ]]; then
    k4w_die "K4W_NO_PROXY must be a comma-separated list without blanks or quotes"
fi

proxy_enabled=0
[[ -n $K4W_HTTP_PROXY || -n $K4W_HTTPS_PROXY ]] && proxy_enabled=1

# NAME=value pairs every downloader understands, upper and lower case, only those set.
proxy_vars=()
if [[ -n $K4W_HTTP_PROXY ]]; then
    proxy_vars+=("HTTP_PROXY=${K4W_HTTP_PROXY}" "http_proxy=${K4W_HTTP_PROXY}")
fi
if [[ -n $K4W_HTTPS_PROXY ]]; then
    proxy_vars+=("HTTPS_PROXY=${K4W_HTTPS_PROXY}" "https_proxy=${K4W_HTTPS_PROXY}")
fi
if ((proxy_enabled)); then
    proxy_vars+=("NO_PROXY=${K4W_NO_PROXY}" "no_proxy=${K4W_NO_PROXY}")
fi

# Files that hold a proxy password are readable by root only: apt and systemd read them as
# root. /etc/environment stays 0644 because PAM gives it to every login session.
secret_mode=0644
[[ ${K4W_HTTP_PROXY}${K4W_HTTPS_PROXY} == *@* ]] && secret_mode=0600

# /etc/environment: keep every other line, replace the proxy variables.
environment_file() {
    local current="" kept line
    [[ -f $(k4w_path "$ENVIRONMENT_FILE") ]] && current="$(cat "$(k4w_path "$ENVIRONMENT_FILE")")"
    kept="$(printf '%s\n' "$current" | grep -Eiv '^[[:space:]]*(export[[:space:]]+)?(http|https|no)_proxy=' | sed '/^$/d' || true)"
    # ${a[@]+...}: xenial's bash 4.3 calls an empty array unbound under `set -u`.
    for line in ${proxy_vars[@]+"${proxy_vars[@]}"}; do
        kept+="${kept:+$'\n'}${line%%=*}=\"${line#*=}\""
    done
    if [[ -z $kept ]]; then
        k4w_remove_file "$ENVIRONMENT_FILE"
    else
        k4w_write_file "$ENVIRONMENT_FILE" 0644 "$kept"
    fi
}

apt_proxy_file() {
    # The same text the preseed's late_command writes, so a fresh box sees no change here.
    local content="// k4w: apt proxy from cluster.yml proxy.http / proxy.https"
    if ((proxy_enabled)); then
        [[ -n $K4W_HTTP_PROXY ]] && content+=$'\n'"Acquire::http::Proxy \"${K4W_HTTP_PROXY}\";"
        [[ -n $K4W_HTTPS_PROXY ]] && content+=$'\n'"Acquire::https::Proxy \"${K4W_HTTPS_PROXY}\";"
        k4w_write_file "$APT_PROXY_FILE" "$secret_mode" "$content"
    else
        k4w_remove_file "$APT_PROXY_FILE"
    fi
    # Drop the installer's copy of mirror/http/proxy: one place defines apt's proxy.
    local installer
    installer="$(k4w_path "$INSTALLER_APT_CONF")"
    if [[ -f $installer ]] && grep -q '^Acquire::http::Proxy ' "$installer"; then
        local rest
        rest="$(grep -v '^Acquire::http::Proxy ' "$installer" | sed '/^[[:space:]]*$/d' || true)"
        if [[ -z $rest ]]; then
            k4w_remove_file "$INSTALLER_APT_CONF"
        else
            k4w_write_file "$INSTALLER_APT_CONF" 0644 "$rest"
        fi
    fi
}

# systemd drop-in per service; returns the services whose drop-in changed in CHANGED_SERVICES.
CHANGED_SERVICES=()
service_drop_ins() {
    local service path content pair
    for service in "${PROXY_SERVICES[@]}"; do
        path="/etc/systemd/system/${service}.service.d/http-proxy.conf"
        if ((proxy_enabled)); then
            content="# k4w: proxy from cluster.yml for ${service}"$'\n'"[Service]"
            for pair in "${proxy_vars[@]}"; do
                content+=$'\n'"Environment=\"$(k4w_systemd_quote "$pair")\""
            done
            k4w_write_file "$path" "$secret_mode" "$content"
        else
            k4w_remove_file "$path"
        fi
        ((K4W_CHANGED)) && CHANGED_SERVICES+=("$service")
    done
    return 0
}

environment_file
apt_proxy_file
service_drop_ins

if ((${#CHANGED_SERVICES[@]} > 0)); then
    k4w_systemctl daemon-reload
    for service in "${CHANGED_SERVICES[@]}"; do
        # A running service only sees new Environment= after a restart; a stopped one at start.
        if k4w_unit_active "$service"; then
            k4w_log "restarting ${service} for the new proxy settings"
            systemctl restart "$service"
        fi
    done
fi

if ((proxy_enabled)); then
    # Says which are set, never the URLs: they may carry credentials.
    http_state="${K4W_HTTP_PROXY:+set}"
    https_state="${K4W_HTTPS_PROXY:+set}"
    k4w_log "proxy configured (http: ${http_state:-none}, https: ${https_state:-none})"
else
    k4w_log "no proxy configured; k4w proxy settings absent"
fi
