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
}
