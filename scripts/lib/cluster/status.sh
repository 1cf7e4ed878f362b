# shellcheck shell=bash
# scripts/cluster status, leftovers, env, logs: read-only looks at the cluster and the host.

cmd_status() {
	local c rc=0 total=0 mb
	for c in $COMPONENTS; do
		if alive "$c"; then
			mb="$(rss_mb "$(pid_of "$c")")"
			total=$((total + mb))
			printf '%-24s up    (pid %s, %s MB RSS)\n' "$c" "$(pid_of "$c")" "$mb"
		else
			printf '%-24s down\n' "$c"
			rc=1
		fi
	done
	if alive kube-apiserver && apiserver_ready; then
		printf '%-24s %s\n' "apiserver /readyz" ok
		if node_ready; then
			printf '%-24s %s\n' "node $(node_name)" Ready
		else
			printf '%-24s %s\n' "node $(node_name)" NotReady
			rc=1
		fi
	else
		printf '%-24s %s\n' "apiserver /readyz" "not ready"
		rc=1
	fi
	local pods shims
	pods="$(pod_pids | tr '\n' ' ')"
	shims="$(shim_pids | tr '\n' ' ')"
	# shellcheck disable=SC2086
	printf '%-24s %s (%s MB RSS)\n' "pod processes" "$(echo $pods | wc -w)" "$(rss_mb $pods)"
	# shellcheck disable=SC2086
	printf '%-24s %s (%s MB RSS)\n' "containerd shims" "$(echo $shims | wc -w)" "$(rss_mb $shims)"
	# shellcheck disable=SC2086
	printf '%-24s %s MB RSS\n' "total" "$((total + $(rss_mb $pods $shims)))"
	[ $rc = 0 ] && echo "cluster: up" || echo "cluster: down (or partly up)"
	return $rc
}

# leftovers: exit 1 (and say what) if anything of a cluster is still running or mounted
cmd_leftovers() {
	local found=0 p exe cmd
	for p in /proc/[0-9]*; do
		exe="$(readlink "$p/exe" 2>/dev/null)" || continue
		cmd="$(tr '\0' ' ' 2>/dev/null <"$p/cmdline")" || continue
		# (dnsmasq: its --conf-file is in the state dir; before that, the --host-record flag)
		case "$exe|$cmd" in
		"$K8S_BIN_DIR"/* | "$ETCD_CACHE_DIR"/* | "$CONTAINERD_BIN_DIR"/* | *"$STATE_DIR"* | *"--host-record=kubernetes.default.svc"*)
			echo "leftover process ${p#/proc/}: $cmd"
			found=1
			;;
		esac
	done
	local m
	m="$(unmount_check)"
	if [ -n "$m" ]; then
		echo "leftover mounts: $m"
		found=1
	fi
	if ip link show "$CNI_BRIDGE" >/dev/null 2>&1; then
		echo "leftover link: $CNI_BRIDGE"
		found=1
	fi
	if iptables-save 2>/dev/null | grep -qE 'KUBE-|CNI-'; then
		echo "leftover iptables rules/chains (KUBE-*/CNI-*)"
		found=1
	fi
	if ls -d /sys/fs/cgroup/*/kubepods >/dev/null 2>&1; then
		echo "leftover cgroups: $(ls -d /sys/fs/cgroup/*/kubepods | tr '\n' ' ')"
		found=1
	fi
	if [ "$found" = 0 ]; then
		echo "nothing of the cluster is left running"
	fi
	return $found
}

cmd_env() {
	cat <<EOF
export KUBECONFIG=$KUBECONFIG_PATH
export PATH="$K8S_BIN_DIR:$CONTAINERD_BIN_DIR:\$PATH"
export CONTAINERD_ADDRESS=$CONTAINERD_SOCK
export CONTAINERD_NAMESPACE=k8s.io
export RANCHEROS_RUNNER_IMAGE=$RUNNER_IMAGE
export OPERATOR_IMAGE=$OPERATOR_IMAGE
export RANCHEROS_TEST_REGISTRY=$REGISTRY_ADDR
export RANCHEROS_TEST_REGISTRY_USER=$REGISTRY_USER
export RANCHEROS_TEST_REGISTRY_PASSWORD=$(cat "$REGISTRY_PASSWORD_FILE" 2>/dev/null)
export RANCHEROS_TEST_WEBHOOK_ADDR=$WEBHOOK_ADDR
export RANCHEROS_TEST_WEBHOOK_TOKEN_FILE=$WEBHOOK_TOKEN_FILE
export RANCHEROS_TEST_REGISTRY_TLS=$REGISTRY_TLS_ADDR
export RANCHEROS_TEST_REGISTRY_TOKEN=$REGISTRY_TOKEN_ADDR
export RANCHEROS_TEST_REGISTRY_CA=$REGISTRY_CA_DIR/ca.crt
export RANCHEROS_TEST_AUDIT_LOG=$AUDIT_LOG
EOF
}

# cmd_logs [COMPONENT [LINES]]: the log files, or the last LINES (100) of one
cmd_logs() {
	if [ -n "${1:-}" ]; then tail -n "${2:-100}" "$LOG_DIR/$1.log"; else ls -1 "$LOG_DIR"/*.log; fi
}
