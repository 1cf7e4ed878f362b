# shellcheck shell=bash
# scripts/cluster: how each component is started (binary, flags, config) and when it counts
# as ready. cmd_up (up.sh) calls these in order.

start_dnsmasq() {
	mkdir -p "$STATE_DIR/dns"
	start dnsmasq "$(command -v dnsmasq)" --keep-in-foreground --conf-file="$CONF_DIR/dnsmasq.conf"
}

start_etcd() {
	start etcd "$ETCD_CACHE_DIR/etcd" --name node --data-dir "$STATE_DIR/etcd" --unsafe-no-fsync \
		--listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
		--listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
		--initial-cluster node=http://127.0.0.1:2380 --listen-metrics-urls= --log-level warn
	wait_for etcd 30 curl -sf --max-time 1 http://127.0.0.1:2379/health
}

# start_apiserver NODE_IP
start_apiserver() {
	local nip="$1"
	# GODEBUG=tlssha1=1: busybox's ssl_client (the runner image's only TLS client) sends no
	# signature_algorithms extension, so a TLS 1.2 server must sign its key exchange with
	# SHA-1, which Go 1.25+ refuses by default ("handshake failure"). Modern clients (kube-rs
	# with rustls, kubectl, curl) never use SHA-1 and are unaffected.
	# shellcheck disable=SC2046 # apiserver_version_flags: zero or more flags
	start kube-apiserver env GODEBUG=tlssha1=1 "$K8S_BIN_DIR/kube-apiserver" \
		--etcd-servers=http://127.0.0.1:2379 \
		--bind-address=0.0.0.0 --secure-port="$APISERVER_PORT" --advertise-address="$nip" \
		--tls-cert-file="$CERT_DIR/apiserver.crt" --tls-private-key-file="$CERT_DIR/apiserver.key" \
		--client-ca-file="$CERT_DIR/ca.crt" --token-auth-file="$CONF_DIR/tokens.csv" \
		--kubelet-client-certificate="$CERT_DIR/apiserver-kubelet-client.crt" \
		--kubelet-client-key="$CERT_DIR/apiserver-kubelet-client.key" \
		--kubelet-preferred-address-types=Hostname,InternalIP,ExternalIP \
		--service-account-key-file="$CERT_DIR/sa.pub" \
		--service-account-signing-key-file="$CERT_DIR/sa.key" \
		--service-account-issuer="https://kubernetes.default.svc.$CLUSTER_DOMAIN" \
		--service-cluster-ip-range="$SERVICE_CIDR" \
		--authorization-mode=Node,RBAC --allow-privileged=true \
		--enable-admission-plugins=NodeRestriction \
		--audit-policy-file="$CONF_DIR/audit-policy.yaml" --audit-log-path="$AUDIT_LOG" \
		--audit-log-format=json --audit-log-maxsize=100 --audit-log-maxbackup=3 \
		$(apiserver_version_flags) \
		--profiling=false --v=1
	wait_for kube-apiserver 60 apiserver_ready
}

# Services -> dnsmasq hosts file (scripts/lib/svc-dns)
start_svc_dns() {
	start svc-dns "$SCRIPTS_DIR/lib/svc-dns" "$K8S_BIN_DIR/kubectl" "$KUBECONFIG_PATH" "$STATE_DIR/dns" "$CLUSTER_DOMAIN"
}

# --resource-quota-sync-period 15s (default 5m): a quota created before the quota controller
# discovered the CRDs (tests install them on a cluster just started, and the test binaries run
# side by side) is counted within seconds, not at the next 5-minute resync.
start_controller_manager() {
	start kube-controller-manager "$K8S_BIN_DIR/kube-controller-manager" \
		--kubeconfig="$CONF_DIR/kube-controller-manager.kubeconfig" \
		--authentication-kubeconfig="$CONF_DIR/kube-controller-manager.kubeconfig" \
		--authorization-kubeconfig="$CONF_DIR/kube-controller-manager.kubeconfig" \
		--controllers='*,-csrsigning' --leader-elect=false --use-service-account-credentials=true \
		--resource-quota-sync-period=15s \
		--root-ca-file="$CERT_DIR/ca.crt" --service-account-private-key-file="$CERT_DIR/sa.key" \
		--service-cluster-ip-range="$SERVICE_CIDR" --allocate-node-cidrs=false \
		--bind-address=127.0.0.1 --secure-port=10257 --profiling=false --v=1
}

start_scheduler() {
	start kube-scheduler "$K8S_BIN_DIR/kube-scheduler" \
		--kubeconfig="$CONF_DIR/kube-scheduler.kubeconfig" \
		--authentication-kubeconfig="$CONF_DIR/kube-scheduler.kubeconfig" \
		--authorization-kubeconfig="$CONF_DIR/kube-scheduler.kubeconfig" \
		--leader-elect=false --bind-address=127.0.0.1 --secure-port=10259 --profiling=false --v=1
}

start_containerd() {
	mkdir -p "$CONTAINERD_ROOT" "$CONTAINERD_STATE" "$RUNC_ROOT"
	start containerd "$CONTAINERD_BIN_DIR/containerd" --config "$CONF_DIR/containerd.toml"
	wait_for containerd 30 ctr --address "$CONTAINERD_SOCK" version
}

start_registry() {
	start docker-registry /usr/bin/docker-registry serve "$CONF_DIR/registry.yml"
	wait_for docker-registry 30 curl -sf --max-time 1 -u "$REGISTRY_USER:$(cat "$REGISTRY_PASSWORD_FILE")" "http://$REGISTRY_ADDR/v2/"
}

# start_kubelet NODE_NAME
start_kubelet() {
	mkdir -p "$KUBELET_ROOT"
	start kubelet "$K8S_BIN_DIR/kubelet" \
		--config="$CONF_DIR/kubelet.yaml" --kubeconfig="$CONF_DIR/kubelet.kubeconfig" \
		--root-dir="$KUBELET_ROOT" --cert-dir="$KUBELET_ROOT/pki" --hostname-override="$1" --v=1
}

start_kube_proxy() {
	start kube-proxy "$K8S_BIN_DIR/kube-proxy" --config="$CONF_DIR/kube-proxy.yaml" --v=1
}

all_alive() {
	local c
	for c in $COMPONENTS; do alive "$c" || return 1; done
	return 0
}

apiserver_ready() {
	curl -sf --max-time 2 --cacert "$CERT_DIR/ca.crt" --cert "$CERT_DIR/admin.crt" --key "$CERT_DIR/admin.key" \
		"https://127.0.0.1:$APISERVER_PORT/readyz" >/dev/null
}

node_ready() {
	[ "$(kc get node "$(node_name)" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

# (since 1.24 no token Secret is generated: the ServiceAccount itself is what pods wait for)
default_sa_ready() {
	kc -n default get serviceaccount default -o name >/dev/null 2>&1
}
