# shellcheck shell=bash
# scripts/cluster check: self-checks of a running cluster, the way the operator uses it. Each
# runs one pod in a namespace of its own run (deleted at the end) and the checks run at once:
#
#   init-container-output    an init container writes into an emptyDir, the main container
#                            prints it and keeps running; phases Pending -> Running, both logs
#                            read through the API server (it proxies to the kubelet), deletion
#   completed-pod            a pod runs to completion: Succeeded, its log still readable, deleted
#   in-cluster-api           a pod with its service-account token reaches the API server through
#                            the `kubernetes` Service (kube-proxy) by the DNS name the in-cluster
#                            config uses, and the API server authenticates the token
#
# Exit 0 when every check passed. It creates nothing outside its namespace and changes nothing
# else, so it is safe on a cluster others are using.

CHECKS="init-container-output completed-pod in-cluster-api"

cmd_check() {
	[ -r "$KUBECONFIG_PATH" ] || die "cannot read $KUBECONFIG_PATH: is the cluster up (scripts/cluster status), and are you root?"
	if ! all_alive || ! apiserver_ready; then die "the cluster is not up (scripts/cluster status)"; fi
	CHECK_NS="rancheros-cluster-check-$$-$RANDOM"
	CHECK_TMP="$(mktemp -d)"
	trap check_cleanup EXIT
	# (a signal must end in the EXIT trap too: bash skips it when a signal kills it)
	trap 'exit 130' INT
	trap 'exit 143' TERM
	log "check: namespace $CHECK_NS, image $RUNNER_IMAGE"
	kc create namespace "$CHECK_NS" >/dev/null
	kc label namespace "$CHECK_NS" app.kubernetes.io/part-of=rancheros-cluster-check >/dev/null
	# pods are refused until the namespace has its default service account
	local deadline=$(($(date +%s) + 60))
	until kc -n "$CHECK_NS" get serviceaccount default -o name >/dev/null 2>&1; do
		[ "$(date +%s)" -lt "$deadline" ] || die "namespace $CHECK_NS has no default service account after 60 s (kube-controller-manager?)"
		sleep 0.2
	done

	local c pids=() t0
	t0=$(date +%s)
	for c in $CHECKS; do
		("check_${c//-/_}" >"$CHECK_TMP/$c.out" 2>&1) &
		pids+=($!)
	done
	local i=0 failed=0 rc
	for c in $CHECKS; do
		rc=0
		wait "${pids[$i]}" || rc=$?
		i=$((i + 1))
		if [ "$rc" = 0 ]; then
			printf 'ok      %s\n' "$c"
		else
			printf 'FAILED  %s\n' "$c"
			sed 's/^/        /' "$CHECK_TMP/$c.out"
			failed=$((failed + 1))
		fi
	done
	if [ "$failed" = 0 ]; then
		log "check: all $(wc -w <<<"$CHECKS") checks passed in $(($(date +%s) - t0)) s"
	else
		log "check: $failed of $(wc -w <<<"$CHECKS") checks FAILED (logs: scripts/cluster logs kubelet|containerd|kube-apiserver)"
		return 1
	fi
}

check_cleanup() {
	kc delete namespace "$CHECK_NS" --wait=false >/dev/null 2>&1 || true
	rm -rf "$CHECK_TMP"
}

# --- helpers (each check runs in a subshell of its own: `fail` ends only that check) --------

fail() {
	echo "$*" >&2
	exit 1
}

ckc() { kc -n "$CHECK_NS" "$@"; }

# create_pod NAME: a pod that is never restarted, the rest of its spec on stdin (indented as
# under `spec:`), @IMAGE@ filled in
create_pod() {
	local manifest
	manifest="apiVersion: v1
kind: Pod
metadata:
  name: $1
spec:
  restartPolicy: Never
$(cat)"
	manifest="${manifest//@IMAGE@/$RUNNER_IMAGE}"
	ckc create -f - <<<"$manifest" >/dev/null || fail "create pod $1 failed"
}

# wait_phase POD SECONDS PHASE...: poll until the pod is in one of PHASEs; PHASES holds the
# phases seen on the way. Failed (unless asked for) and the time limit end the check.
wait_phase() {
	local pod="$1" secs="$2" p want
	shift 2
	local deadline=$(($(date +%s) + secs)) wanted="$*"
	PHASES=()
	while :; do
		p="$(ckc get pod "$pod" -o jsonpath='{.status.phase}')" || fail "get pod $pod failed"
		p="${p:-<none>}"
		[ "${#PHASES[@]}" -gt 0 ] && [ "${PHASES[-1]}" = "$p" ] || PHASES+=("$p")
		for want in "$@"; do [ "$p" = "$want" ] && return 0; done
		[ "$p" != Failed ] || fail "pod $pod failed; phases ${PHASES[*]}; status $(ckc get pod "$pod" -o jsonpath='{.status}')"
		[ "$(date +%s)" -lt "$deadline" ] ||
			fail "pod $pod not ${wanted// / or } after ${secs} s; phases ${PHASES[*]}; status $(ckc get pod "$pod" -o jsonpath='{.status}')"
		sleep 0.2
	done
}

# pod_log POD CONTAINER: the container's log into LOG, exactly (a command substitution would
# drop its trailing newlines)
pod_log() {
	LOG="$(ckc logs "$1" -c "$2" && echo .)" || fail "logs of $1/$2 failed"
	LOG="${LOG%.}"
}

# expect_eq WHAT ACTUAL EXPECTED
expect_eq() {
	[ "$2" = "$3" ] || fail "$1: expected $(printf '%q' "$3"), got $(printf '%q' "$2")"
}

# delete_and_wait POD: deleted and gone from the API within 90 s
delete_and_wait() {
	ckc delete pod "$1" --timeout=90s >/dev/null || fail "pod $1 still exists 90 s after delete"
}

# --- the checks -----------------------------------------------------------------------------

# The syncer-pod shape: the init container writes into an emptyDir, the main container prints
# the file and stays up (like `display`) until the pod is deleted.
check_init_container_output() {
	create_pod init-output <<'YAML'
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 5
  volumes:
  - {name: data, emptyDir: {}}
  initContainers:
  - name: runner
    image: @IMAGE@
    imagePullPolicy: IfNotPresent
    command: [/bin/sh, -c, --]
    args:
    - echo '[{"metadata":{"name":"foo"}}]' > /output/data && echo written
    volumeMounts: [{name: data, mountPath: /output}]
  containers:
  - name: display
    image: @IMAGE@
    imagePullPolicy: IfNotPresent
    command: [/bin/bash, -c]
    args:
    - trap 'exit 0' TERM; cat /output/data; echo "bash ${BASH_VERSION%%.*}"; while :; do sleep 1; done
    volumeMounts: [{name: data, mountPath: /output}]
YAML
	wait_phase init-output 120 Running
	expect_eq "first phase seen" "${PHASES[0]}" Pending
	local code
	code="$(ckc get pod init-output -o jsonpath='{.status.initContainerStatuses[0].state.terminated.exitCode}')"
	expect_eq "init container exit code (terminated before the pod runs)" "$code" 0
	pod_log init-output runner
	expect_eq "init container log" "$LOG" $'written\n'
	# the main container's log: what it printed once it has printed it all
	local deadline=$(($(date +%s) + 30))
	while :; do
		pod_log init-output display
		[[ "$LOG" == *"bash "* ]] || [ "$(date +%s)" -ge "$deadline" ] && break
		sleep 0.2
	done
	expect_eq "main container log" "$LOG" $'[{"metadata":{"name":"foo"}}]\nbash 5\n'
	delete_and_wait init-output
}

# A pod that runs to completion: phase Succeeded, log still readable, deleted quickly.
check_completed_pod() {
	create_pod completed <<'YAML'
  automountServiceAccountToken: false
  volumes:
  - {name: data, emptyDir: {}}
  initContainers:
  - name: init
    image: @IMAGE@
    imagePullPolicy: IfNotPresent
    command: [/bin/sh, -c, "printf 'line 1\\nline 2\\n' > /data/out"]
    volumeMounts: [{name: data, mountPath: /data}]
  containers:
  - name: main
    image: @IMAGE@
    imagePullPolicy: IfNotPresent
    command: [/bin/sh, -c, cat /data/out]
    volumeMounts: [{name: data, mountPath: /data}]
YAML
	wait_phase completed 120 Succeeded
	pod_log completed main
	expect_eq "main container log" "$LOG" $'line 1\nline 2\n'
	delete_and_wait completed
}

# In-cluster API access through the `kubernetes` Service under its DNS name. busybox's
# ssl_client speaks TLS over the connection bash opens (no certificate check: that part is the
# operator's own client's job; here it is the routing and the token).
check_in_cluster_api() {
	create_pod api <<'YAML'
  containers:
  - name: main
    image: @IMAGE@
    imagePullPolicy: IfNotPresent
    command:
    - /bin/bash
    - -c
    - |
      set -eu
      sa=/var/run/secrets/kubernetes.io/serviceaccount
      test -s $sa/token && test -s $sa/ca.crt && echo "token mounted"
      echo "env ${KUBERNETES_SERVICE_HOST}:${KUBERNETES_SERVICE_PORT}"
      exec 3<>/dev/tcp/kubernetes.default.svc/443
      echo "tcp kubernetes.default.svc:443 ok"
      exec 3<&- 3>&-
      req="GET /api/v1/namespaces/default/pods?limit=1 HTTP/1.0\r\nHost: kubernetes.default.svc\r\nAuthorization: Bearer $(cat $sa/token)\r\n\r\n"
      coproc TLS { /bin/ssl_client -s 3 -n kubernetes.default.svc 3<>/dev/tcp/${KUBERNETES_SERVICE_HOST}/${KUBERNETES_SERVICE_PORT}; }
      printf "$req" >&"${TLS[1]}"
      head -n 1 <&"${TLS[0]}"
YAML
	wait_phase api 120 Succeeded Failed
	local log phase
	pod_log api main
	log="$LOG"
	phase="${PHASES[-1]}"
	[ "$phase" = Succeeded ] || fail "phase $phase (phases ${PHASES[*]}); log:"$'\n'"$log"
	local want
	for want in "token mounted" "env $KUBERNETES_SVC_IP:443" "tcp kubernetes.default.svc:443 ok"; do
		[[ "$log" == *"$want"* ]] || fail "log lacks '$want':"$'\n'"$log"
	done
	# The default service account may not list pods (RBAC): 403 proves the token was
	# authenticated (an unknown token gives 401).
	[[ "$log" == *"HTTP/1.0 403"* || "$log" == *"HTTP/1.1 403"* || "$log" == *" 200 "* ]] ||
		fail "the API server did not answer 403 (token authenticated, not authorized) or 200:"$'\n'"$log"
	delete_and_wait api
}
