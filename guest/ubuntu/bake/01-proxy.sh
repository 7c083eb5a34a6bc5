#!/usr/bin/env bash
# Step 1: the proxy reaches every place that downloads - login shells (/etc/environment), apt,
# and the docker and kubelet services (systemd drop-ins). Without a proxy, every file this
# step may have written before is removed, so a box never carries a stale proxy.
#
# Env (every value computed by k4w.derive from cluster.yml; each may be empty, all must be set):
# K4W_PROXY_ENV - the NAME=value pairs every downloader understands (HTTP_PROXY, https_proxy,
#   NO_PROXY, ...; https is never copied from http), blank-separated: cluster.yml allows no blank
#   in a proxy URL or NO_PROXY entry. Empty = no proxy.
# K4W_APT_PROXY_CONF - the text of apt's proxy file, the same the installer's late_command wrote.
# K4W_PROXY_FILE_MODE - the mode of the files that carry the proxy URLs (0600 with credentials).
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

k4w_require_defined K4W_PROXY_ENV K4W_APT_PROXY_CONF
k4w_require K4W_PROXY_FILE_MODE
k4w_distro >/dev/null
[[ $K4W_PROXY_FILE_MODE =~ ^0[0-7]{3}$ ]] || k4w_die "K4W_PROXY_FILE_MODE must be a file mode such as 0600, not '${K4W_PROXY_FILE_MODE}'"

read -r -a proxy_vars <<<"$K4W_PROXY_ENV"
# ${a[@]+...}: xenial's bash 4.3 calls an empty array unbound under `set -u`.
for pair in ${proxy_vars[@]+"${proxy_vars[@]}"}; do
    # The name only: the value may carry credentials.
    [[ $pair =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || k4w_die "K4W_PROXY_ENV holds '${pair%%=*}', which is not a NAME=value pair"
done
proxy_enabled=0
((${#proxy_vars[@]} > 0)) && proxy_enabled=1

# /etc/environment: keep every other line, replace the proxy variables.
environment_file() {
    local current="" kept line
    [[ -f $(k4w_path "$ENVIRONMENT_FILE") ]] && current="$(cat "$(k4w_path "$ENVIRONMENT_FILE")")"
    kept="$(printf '%s\n' "$current" | grep -Eiv '^[[:space:]]*(export[[:space:]]+)?(http|https|no)_proxy=' | sed '/^$/d' || true)"
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
    if [[ -n $K4W_APT_PROXY_CONF ]]; then
        k4w_write_file "$APT_PROXY_FILE" "$K4W_PROXY_FILE_MODE" "$K4W_APT_PROXY_CONF"
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
            k4w_write_file "$path" "$K4W_PROXY_FILE_MODE" "$content"
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
    # Names only, never the URLs: they may carry credentials.
    k4w_log "proxy configured: ${proxy_vars[*]%%=*}"
else
    k4w_log "no proxy configured; k4w proxy settings absent"
fi
