#!/usr/bin/env bash
# Give the cluster NIC its static address, idempotently: with netplan where the guest has it
# (Ubuntu 24.04; /etc/netplan), else with ifupdown (Ubuntu 16.04, which predates netplan).
# Run by cluster-up as root. Input: K4W_NODE_IP, K4W_PREFIX_LENGTH, K4W_CLUSTER_MAC, K4W_SERVICE_CIDR.
# K4W_ROOT (default empty) is an offline sandbox for tests, as in guest/ubuntu/lib.sh: the files
# and /sys are taken under it, and the commands are whatever PATH holds.
# The cluster NIC is the interface whose MAC is K4W_CLUSTER_MAC, the static MAC cluster-up gave it
# on the host (host/cluster-nic.ps1): never a name like eth1 or "the NIC without the default route",
# which change with probe order and with a NIC that was missing or re-added. No gateway is
# configured on it: outbound traffic keeps using the management NIC.
# One route is: the Service range (network.service_cidr), on-link through the cluster NIC. A ClusterIP
# is no address on any wire: kube-proxy's DNAT rewrites it after the kernel has routed the packet, so
# a host process (the kubelet, a hostNetwork pod such as flanneld reaching 10.96.0.1) needs some route
# to the range or its connect() fails with "network is unreachable". The management NIC's default
# route gave one by chance, and a management network without a gateway (libvirt
# management_forward: none) gives none: the fourth libvirt run's flanneld exited on exactly that. With
# the route, node-to-Service traffic leaves from the node's own InternalIP whatever the management
# network offers.
set -euo pipefail
trap 'echo "cluster-ip.sh: line $LINENO: \"$BASH_COMMAND\" failed" >&2' ERR

: "${K4W_NODE_IP:?K4W_NODE_IP (the cluster IP of this node) must be set}"
: "${K4W_PREFIX_LENGTH:?K4W_PREFIX_LENGTH (network.node_cidr prefix length) must be set}"
: "${K4W_CLUSTER_MAC:?K4W_CLUSTER_MAC (the cluster NIC MAC address, aa:bb:cc:dd:ee:ff) must be set}"
: "${K4W_SERVICE_CIDR:?K4W_SERVICE_CIDR (network.service_cidr, a.b.c.d/n) must be set}"
CLUSTER_MAC="$(printf '%s' "$K4W_CLUSTER_MAC" | tr 'A-F' 'a-f')"   # sysfs and netplan write it in lower case
TIMEOUT_SECONDS="${K4W_TIMEOUT_SECONDS:-60}"
ROOT="${K4W_ROOT:-}"
if [ -d "$ROOT/etc/netplan" ]; then
  BACKEND=netplan
  # Read after the installer's own file (50-cloud-init.yaml, eth0 by DHCP), as Vagrant's 50-vagrant.yaml is.
  CONFIG="$ROOT/etc/netplan/60-k4w-cluster.yaml"
else
  BACKEND=ifupdown
  CONFIG="$ROOT/etc/network/interfaces.d/k4w-cluster.cfg"
fi

netmask_of() {
  local bits=$1 mask="" octet _
  for _ in 1 2 3 4; do
    if [ "$bits" -ge 8 ]; then octet=255; bits=$((bits - 8)); else octet=$((256 - (1 << (8 - bits)))); bits=0; fi
    mask="${mask:+$mask.}$octet"
  done
  echo "$mask"
}

has_address() {
  ip -4 -o addr show | awk '{print $4}' | grep -qx "$K4W_NODE_IP/$K4W_PREFIX_LENGTH"
}

# The NIC itself (a device, hv_netvsc, behind it), not a virtual interface that copied its MAC.
nic_with_cluster_mac() {
  local path
  for path in "$ROOT"/sys/class/net/*; do
    if [ -e "$path/device" ] && [ "$(tr 'A-F' 'a-f' < "$path/address" 2>/dev/null || true)" = "$CLUSTER_MAC" ]; then
      echo "${path##*/}"
      return 0
    fi
  done
  return 1
}

# A NIC the host step has just hot-added takes a moment to appear in the guest: wait for it.
deadline=$((SECONDS + TIMEOUT_SECONDS))
until nic="$(nic_with_cluster_mac)"; do
  if [ "$SECONDS" -ge "$deadline" ]; then
    echo "cluster-ip.sh: no network interface has the cluster NIC's MAC $CLUSTER_MAC after ${TIMEOUT_SECONDS}s: the host step (host/cluster-nic.ps1) did not attach it; run invoke cluster-up again" >&2
    exit 1
  fi
  sleep 1
done

if [ "$BACKEND" = netplan ]; then
  wanted="# k4w cluster NIC on the Internal switch: static, no gateway (written by cluster-up)
network:
  version: 2
  ethernets:
    # Matched by MAC, so the file holds whatever name the kernel gives the NIC. No set-name: the
    # interface keeps its kernel name (netplan apply cannot rename a NIC that is up, so a rename
    # would wait for the next boot and change a name under a running kubelet).
    k4w-cluster:
      match:
        macaddress: \"$CLUSTER_MAC\"
      dhcp4: false
      dhcp6: false
      addresses:
        - $K4W_NODE_IP/$K4W_PREFIX_LENGTH
      routes:
        # netplan refuses a route without via unless its scope is link (doc/netplan-yaml.md, routes).
        - to: \"$K4W_SERVICE_CIDR\"
          scope: link
"
else
  # ifupdown (16.04) matches no MAC: the stanza names the interface found by MAC above, and is
  # rewritten (below) should the kernel ever name it differently.
  wanted="# k4w cluster NIC on the Internal switch: static, no gateway (written by cluster-up)
# MAC $CLUSTER_MAC
auto $nic
iface $nic inet static
    address $K4W_NODE_IP
    netmask $(netmask_of "$K4W_PREFIX_LENGTH")
    up ip route replace $K4W_SERVICE_CIDR dev $nic scope link
"
  if ! grep -q '^source /etc/network/interfaces.d/\*' "$ROOT/etc/network/interfaces"; then
    echo "cluster-ip.sh: /etc/network/interfaces does not source interfaces.d/*, so $CONFIG would be ignored" >&2
    exit 1
  fi
fi
# Both sides through $( ): it drops the trailing newline from each, so an unchanged file compares equal.
if [ "$(cat "$CONFIG" 2>/dev/null || true)" != "$(printf '%s' "$wanted")" ]; then
  if [ "$BACKEND" = netplan ]; then
    printf '%s' "$wanted" > "$CONFIG"
    chmod 600 "$CONFIG"   # netplan warns that a configuration readable by others is too open
    echo "cluster-ip.sh: wrote $CONFIG for $nic"
    # As Vagrant applies its own netplan networks, over SSH on the management NIC (hashicorp/vagrant
    # plugins/guests/debian/cap/configure_networks.rb at 35f3160f).
    netplan apply
  else
    printf '%s' "$wanted" > "$CONFIG"
    echo "cluster-ip.sh: wrote $CONFIG for $nic"
    ifdown "$nic" 2>/dev/null || true   # it may not be configured yet; ifup below reports real errors
    ifup "$nic"
  fi
fi
# Re-applied on every cluster-up: the config above brings the address back at boot, but not when it
# went missing since (a NIC reconnected to the cluster switch by host/cluster-nic.ps1, an `ip addr
# flush`), and ifup then does nothing for an interface ifupdown already counts as configured
# (nor does netplan apply for a file that did not change).
if ! has_address; then
  ip link set "$nic" up
  ip addr replace "$K4W_NODE_IP/$K4W_PREFIX_LENGTH" dev "$nic"
  echo "cluster-ip.sh: re-applied $K4W_NODE_IP/$K4W_PREFIX_LENGTH on $nic"
fi

# The Service route as well, for the same reasons as the address (idempotent: replace).
ip route replace "$K4W_SERVICE_CIDR" dev "$nic" scope link

deadline=$((SECONDS + TIMEOUT_SECONDS))
until has_address && ! ip -4 -o addr show dev "$nic" | grep -q tentative; do
  if [ "$SECONDS" -ge "$deadline" ]; then
    echo "cluster-ip.sh: $K4W_NODE_IP/$K4W_PREFIX_LENGTH did not appear on $nic within ${TIMEOUT_SECONDS}s" >&2
    exit 1
  fi
  sleep 1
done
echo "cluster-ip.sh: $K4W_NODE_IP/$K4W_PREFIX_LENGTH is up on $nic, with the Service range $K4W_SERVICE_CIDR routed through it"
