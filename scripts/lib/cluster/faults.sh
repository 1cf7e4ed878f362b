# shellcheck shell=bash
# scripts/cluster kill|start COMPONENT: one component stopped as a crash would stop it
# (SIGKILL, no chance to clean up) and started again as `up` started it, for the tests of
# control-plane faults (tests/faults.rs), which so need not know any command line.

# The components that can be killed and started again on their own.
FAULT_COMPONENTS="etcd kube-apiserver kube-controller-manager kube-scheduler kubelet"

fault_component() {
	[[ " $FAULT_COMPONENTS " == *" ${1:-} "* ]] || die "usage: scripts/cluster kill|start COMPONENT (one of: $FAULT_COMPONENTS)"
}

cmd_kill() {
	need_root
	fault_component "${1:-}"
	local name="$1" pid i
	alive "$name" || die "$name is not running"
	pid="$(pid_of "$name")"
	kill -KILL "$pid"
	for ((i = 0; i < 200; i++)); do
		running "$pid" || break
		sleep 0.05
	done
	running "$pid" && die "$name ($pid) still runs after SIGKILL"
	rm -f "$PID_DIR/$name.pid"
	log "$name killed (SIGKILL)"
}

cmd_start() {
	need_root
	fault_component "${1:-}"
	local name="$1"
	if alive "$name"; then
		log "$name already runs"
		return 0
	fi
	case "$name" in
	etcd) start_etcd ;;
	kube-apiserver) start_apiserver "$(node_ip)" ;;
	kube-controller-manager) start_controller_manager ;;
	kube-scheduler) start_scheduler ;;
	kubelet)
		start_kubelet "$(node_name)"
		wait_for kubelet 90 node_ready
		;;
	esac
	alive "$name" || fail_with_log "$name" "$name exited during start"
	log "$name started"
	case "$name" in
	etcd | kube-apiserver) restart_api_clients ;;
	esac
}

# After etcd or the API server was gone, the controller manager and the scheduler are started
# afresh. On a control plane with leader election (every real one) they exit once their lease
# cannot be renewed (10 s) and the kubelet starts them again; this cluster runs one of each
# without leader election, and a kube-controller-manager that lived through an etcd restart
# was seen to serve informer caches minutes behind ("read version 1501 is not as new as
# written version 4222"): new namespaces got no default ServiceAccount and ReplicaSets no pods
# for minutes, which failed whichever test came next.
restart_api_clients() {
	local c
	for c in kube-controller-manager kube-scheduler; do
		stop_component "$c"
	done
	start_controller_manager
	start_scheduler
	for c in kube-controller-manager kube-scheduler; do
		alive "$c" || fail_with_log "$c" "$c exited during start"
	done
	log "kube-controller-manager and kube-scheduler started afresh"
}
