# shellcheck shell=bash
# scripts/cluster: the host around the cluster. `up` records what it is about to change
# (record_host_state) and changes it (setup_host); `down` undoes exactly that (restore_host).

record_host_state() {
	[ -s "$HOSTINFO" ] && return 0
	{
		echo "ip_forward=$(cat /proc/sys/net/ipv4/ip_forward)"
		echo "route_localnet=$(cat /proc/sys/net/ipv4/conf/all/route_localnet)"
		if [ -e /proc/sys/net/bridge/bridge-nf-call-iptables ]; then
			echo "bridge_nf=$(cat /proc/sys/net/bridge/bridge-nf-call-iptables)"
		fi
		local p
		for p in $FIXED_HOST_PATHS; do
			if [ -e "$p" ]; then echo "existed=$p"; fi
		done
		if ip link show "$CNI_BRIDGE" >/dev/null 2>&1; then echo "bridge_existed=1"; fi
	} >"$HOSTINFO"
}

hostinfo_get() { sed -n "s/^$1=//p" "$HOSTINFO" 2>/dev/null | head -n1; }

setup_host() {
	sysctl -qw net.ipv4.ip_forward=1
	# The cni0 bridge exists before the first pod, so the cluster DNS (dnsmasq) can bind to
	# its gateway address; the bridge CNI plugin adopts it.
	if ! ip link show "$CNI_BRIDGE" >/dev/null 2>&1; then
		ip link add "$CNI_BRIDGE" type bridge
	fi
	ip addr replace "$(pod_gw)/${POD_CIDR#*/}" dev "$CNI_BRIDGE"
	ip link set "$CNI_BRIDGE" up
}

check_ports_free() {
	local port
	for port in 2379 2380 "$APISERVER_PORT" 10248 10249 10250 10256 10257 10259 "${REGISTRY_ADDR##*:}" \
		"${REGISTRY_TLS_ADDR##*:}" "${REGISTRY_TOKEN_ADDR##*:}" "${TOKEN_SERVER_ADDR##*:}"; do
		if ss -Htln "sport = :$port" 2>/dev/null | grep -q .; then
			die "port $port is already in use (another cluster running? 'ss -tlnp sport = :$port'); run 'scripts/cluster down' or stop it"
		fi
	done
}

# check_host_name NODE_NAME: the kubelet serves (logs, exec) on loopback only; the API server
# reaches it through the node's Hostname address, so the host name must resolve to loopback.
check_host_name() {
	local nname="$1"
	case "$(getent ahostsv4 "$nname" 2>/dev/null | awk 'NR == 1 {print $1}')" in
	127.*) ;;
	*) die "the host name '$nname' does not resolve to 127.x (see /etc/hosts); the API server reaches the kubelet (bound to 127.0.0.1) by that name. Add '127.0.1.1 $nname' to /etc/hosts." ;;
	esac
}

unmount_under() {
	local prefix
	for prefix in "$@"; do
		awk '{print $5}' /proc/self/mountinfo | sed 's/\\040/ /g' | { grep -E "^${prefix}(/|$)" || true; } |
			awk '{print length, $0}' | sort -rn | cut -d' ' -f2- | while read -r m; do
			umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "could not unmount $m"
		done
	done
}

unmount_check() {
	awk '{print $5}' /proc/self/mountinfo | grep -E "^($STATE_DIR|/var/lib/kubelet|/run/containerd)(/|$)" | tr '\n' ' ' || true
}

clean_iptables() {
	local save restore
	for save in iptables-save ip6tables-save; do
		command -v "$save" >/dev/null || continue
		restore="${save/-save/-restore}"
		local dump
		dump="$("$save" 2>/dev/null)" || continue
		if grep -qE 'KUBE-|CNI-' <<<"$dump"; then
			grep -vE 'KUBE-|CNI-' <<<"$dump" | "$restore" 2>/dev/null || log "$restore failed; leftover KUBE-/CNI- rules"
		fi
	done
}

remove_cgroups() {
	local c
	for c in /sys/fs/cgroup/*/; do
		[ -d "$c/kubepods" ] || continue
		find "$c/kubepods" -depth -type d -exec rmdir {} \; 2>/dev/null || true
	done
}

# restore_host: unmount, drop the rules, links and cgroups of the cluster, and put the
# sysctls and fixed paths back to how record_host_state found them (the processes are gone)
restore_host() {
	unmount_under "$STATE_DIR" /var/lib/kubelet /run/containerd /var/run/netns /run/netns
	clean_iptables
	if [ "$(hostinfo_get bridge_existed)" != 1 ]; then
		ip link del "$CNI_BRIDGE" 2>/dev/null || true
	fi
	remove_cgroups

	# sysctls back to what they were before `up`
	local v
	v="$(hostinfo_get ip_forward)"
	[ -n "$v" ] && sysctl -qw "net.ipv4.ip_forward=$v"
	v="$(hostinfo_get route_localnet)"
	[ -n "$v" ] && sysctl -qw "net.ipv4.conf.all.route_localnet=$v"
	v="$(hostinfo_get bridge_nf)"
	[ -n "$v" ] && [ -e /proc/sys/net/bridge/bridge-nf-call-iptables ] && sysctl -qw "net.bridge.bridge-nf-call-iptables=$v"

	# fixed host paths that did not exist before `up`
	local p
	for p in $FIXED_HOST_PATHS; do
		if ! grep -qx "existed=$p" "$HOSTINFO" 2>/dev/null && [ -e "$p" ]; then
			rm -rf "$p" 2>/dev/null || log "could not remove $p"
		fi
	done
}
