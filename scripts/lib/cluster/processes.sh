# shellcheck shell=bash
# scripts/cluster: the components' processes (start in their own session, pid files, stop)
# and the processes that belong to the cluster without a pid file (pods, containerd shims).

pid_of() { [ -s "$PID_DIR/$1.pid" ] && cat "$PID_DIR/$1.pid"; }

# alive NAME: the recorded pid runs and is still that component (guards against pid reuse).
alive() {
	local pid exe
	pid="$(pid_of "$1")" || return 1
	[ -n "$pid" ] && [ -d "/proc/$pid" ] || return 1
	exe="$(readlink "/proc/$pid/exe" 2>/dev/null || true)"
	local bin="${COMPONENT_BINARY[$1]:-$1}"
	case "$exe" in *"/$bin" | *"/$bin (deleted)") return 0 ;; esac
	# scripts (svc-dns): the interpreter runs them
	[ -n "$exe" ] && tr '\0' '\n' 2>/dev/null <"/proc/$pid/cmdline" | head -n 3 | grep -q "/$1\$"
}

# close_inherited_fds: close every descriptor above 2 of this (sub)shell. A daemon must not
# keep what its caller had open: a flock held on an inherited descriptor (scripts/test's
# lock, build-k8s's, a caller's own) would stay held for as long as the daemon runs.
close_inherited_fds() {
	local fd
	for fd in /proc/self/fd/*; do
		fd="${fd##*/}"
		# (the glob's own directory descriptor is gone by now: closing it is a no-op)
		[ "$fd" -gt 2 ] && eval "exec $fd>&-"
	done
	return 0
}

# start NAME BINARY ARGS... : own session, log to $LOG_DIR/NAME.log, pid to $PID_DIR/NAME.pid,
# stdin from /dev/null and no other descriptor of ours (close_inherited_fds)
start() {
	local name="$1"
	shift
	echo "=== $(date -u +%FT%TZ) start: $*" >>"$LOG_DIR/$name.log"
	(
		close_inherited_fds
		exec setsid "$@"
	) >>"$LOG_DIR/$name.log" 2>&1 </dev/null &
	echo $! >"$PID_DIR/$name.pid"
	# wait until the forked shell has exec'd the binary (alive checks /proc/PID/exe)
	local i
	for ((i = 0; i < 100; i++)); do
		alive "$name" && return 0
		[ -d "/proc/$!" ] || return 0
		sleep 0.02
	done
}

fail_with_log() {
	local name="$1"
	shift
	echo "---- last lines of $LOG_DIR/$name.log ----" >&2
	tail -n 25 "$LOG_DIR/$name.log" >&2 || true
	die "$* (cluster start failed; logs in $LOG_DIR; run 'scripts/cluster down' to clean up)"
}

# wait_for NAME SECONDS COMMAND... : poll until COMMAND succeeds, the process dies, or time is up
wait_for() {
	local name="$1" secs="$2"
	shift 2
	local deadline=$(($(date +%s) + secs))
	until "$@" >/dev/null 2>&1; do
		alive "$name" || fail_with_log "$name" "$name exited during start"
		[ "$(date +%s)" -lt "$deadline" ] || fail_with_log "$name" "$name not ready after ${secs}s"
		sleep 0.2
	done
}

# running PID: exists and is not a zombie (exited children of init may linger unreaped)
running() {
	local st
	st="$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" || return 1
	[ -n "$st" ] && [ "$st" != Z ]
}

stop_component() {
	local name="$1" secs="${2:-10}" pid i
	alive "$name" || {
		rm -f "$PID_DIR/$name.pid"
		return 0
	}
	pid="$(pid_of "$name")"
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < secs * 20; i++)); do
		running "$pid" || break
		sleep 0.05
	done
	if running "$pid"; then
		log "$name ($pid) did not stop on SIGTERM; SIGKILL"
		kill -KILL "$pid" 2>/dev/null || true
		sleep 0.2
	fi
	rm -f "$PID_DIR/$name.pid"
}

# pids of every process in the kubelet's kubepods cgroups (the pods' containers)
pod_pids() {
	local c
	for c in pids memory cpu freezer; do
		[ -d "/sys/fs/cgroup/$c/kubepods" ] || continue
		find "/sys/fs/cgroup/$c/kubepods" -name cgroup.procs -exec cat {} + 2>/dev/null
	done | sort -un
}

# pids of the containerd shims that our containerd (its socket) started
shim_pids() {
	local p cmd
	for p in /proc/[0-9]*; do
		cmd="$(tr '\0' ' ' 2>/dev/null <"$p/cmdline")" || continue
		case "$cmd" in *containerd-shim*"$CONTAINERD_SOCK"*) echo "${p#/proc/}" ;; esac
	done
}

kill_pids() {
	local sig="$1" pids
	shift
	pids="$*"
	[ -n "${pids// /}" ] || return 0
	# shellcheck disable=SC2086
	kill "-$sig" $pids 2>/dev/null || true
}

rss_mb() {
	local total=0 p kb
	for p in "$@"; do
		kb="$(awk '/^VmRSS:/ {print $2}' "/proc/$p/status" 2>/dev/null)" || continue
		total=$((total + ${kb:-0}))
	done
	echo $((total / 1024))
}
