# shellcheck shell=bash
# scripts/cluster up: install what is missing, write certificates and configs, start the
# components in order and wait until the node is Ready. Idempotent.

install_all() {
	need_root
	# shellcheck disable=SC2086
	ensure_pkgs $HOST_PKGS $NODE_PKGS dnsmasq-base docker-registry apache2-utils skopeo gettext-base
	"$SCRIPTS_DIR/build-k8s"
	"$SCRIPTS_DIR/images" base >/dev/null
}

cmd_up() {
	need_root
	local t0
	t0=$(date +%s)
	if all_alive && apiserver_ready; then
		log "cluster already up"
		cmd_env
		return 0
	fi
	install_all
	if [ -d "$PID_DIR" ] || [ -d "$CONF_DIR" ]; then
		log "cleaning up a partial or stale cluster first"
		cmd_down >/dev/null
	fi
	check_ports_free
	[ ! -S /run/containerd/containerd.sock ] || log "note: another containerd socket exists at /run/containerd/containerd.sock (not ours; ours is $CONTAINERD_SOCK)"

	local nip nname t1
	nip="$(node_ip)"
	nname="$(node_name)"
	check_host_name "$nname"
	mkdir -p "$STATE_DIR" "$PID_DIR"
	# keep one previous run's logs
	if [ -d "$LOG_DIR" ]; then
		rm -rf "$STATE_DIR/logs.previous"
		mv "$LOG_DIR" "$STATE_DIR/logs.previous"
	fi
	mkdir -p "$LOG_DIR"
	chmod 700 "$STATE_DIR"
	record_host_state
	log "generating certificates and configuration in $STATE_DIR (node $nname, $nip)"
	gen_certs "$nip" "$nname"
	write_configs "$nname"
	write_registry_configs
	setup_host
	t1=$(date +%s)

	log "starting dnsmasq (cluster DNS on $(pod_gw):53) and etcd"
	start_dnsmasq
	start_etcd

	log "starting kube-apiserver"
	start_apiserver "$nip"
	start_svc_dns

	log "starting kube-controller-manager, kube-scheduler, containerd"
	start_controller_manager
	start_scheduler
	start_containerd

	import_node_images

	log "starting the test registry on $REGISTRY_ADDR and pushing the runner image to it"
	start_registry
	push_test_images
	log "starting the TLS test registries on $REGISTRY_TLS_ADDR and $REGISTRY_TOKEN_ADDR (token server $TOKEN_SERVER_ADDR)"
	start_tls_registries

	log "starting kubelet and kube-proxy"
	start_kubelet "$nname"
	start_kube_proxy

	wait_for kubelet 90 node_ready
	wait_for kube-controller-manager 60 default_sa_ready
	alive kube-proxy || fail_with_log kube-proxy "kube-proxy exited"
	alive kube-scheduler || fail_with_log kube-scheduler "kube-scheduler exited"
	alive dnsmasq || fail_with_log dnsmasq "dnsmasq exited"
	alive svc-dns || fail_with_log svc-dns "svc-dns exited"
	local t2
	t2=$(date +%s)
	echo "up_seconds=$((t2 - t1)) total_seconds=$((t2 - t0))" >"$STATE_DIR/last-up"
	log "cluster up: node $nname Ready in $((t2 - t1)) s after start ($((t2 - t0)) s including install/build checks)"
	cmd_env
}
