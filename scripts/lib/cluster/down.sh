# shellcheck shell=bash
# scripts/cluster down: stop exactly what `up` started, in an order that lets nothing restart
# or hold a mount (see docs/cluster.md), then undo its host changes. Safe to repeat.

cmd_down() {
	need_root
	[ -d "$STATE_DIR" ] || {
		log "cluster is down (no $STATE_DIR)"
		return 0
	}
	log "stopping the cluster"
	# no new pods, then the node
	stop_component kube-scheduler
	stop_component kube-controller-manager
	stop_component kube-proxy
	stop_component kubelet 15
	# the pods' processes, then containerd, then its shims (they outlive containerd)
	local i
	for ((i = 0; i < 50; i++)); do
		local pp
		pp="$(pod_pids)"
		[ -z "$pp" ] && break
		# shellcheck disable=SC2086
		kill_pids KILL $pp
		sleep 0.1
	done
	stop_component containerd 10
	stop_component docker-registry
	stop_tls_registries
	# shellcheck disable=SC2046
	kill_pids TERM $(shim_pids)
	for ((i = 0; i < 30; i++)); do
		[ -z "$(shim_pids)" ] && break
		sleep 0.1
	done
	# shellcheck disable=SC2046
	kill_pids KILL $(shim_pids)
	stop_component svc-dns
	stop_component kube-apiserver
	stop_component etcd
	stop_component dnsmasq

	# anything else recorded (older runs, renamed components)
	local f
	for f in "$PID_DIR"/*.pid; do
		[ -e "$f" ] || continue
		stop_component "$(basename "$f" .pid)"
	done

	restore_host

	# keep the logs of the last run, drop everything else
	find "$STATE_DIR" -mindepth 1 -maxdepth 1 ! -name logs ! -name logs.previous -exec rm -rf {} + 2>/dev/null || true
	local left
	left="$(unmount_check)"
	[ -n "$left" ] && log "WARNING: mounts left: $left"
	log "cluster down (logs of the last run kept in $LOG_DIR)"
}
