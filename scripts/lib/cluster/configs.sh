# shellcheck shell=bash
# scripts/cluster: the components' configuration files, rendered from templates/ into
# $CONF_DIR (and the CNI conf dir) on every `up`, and the flags that depend on the release.

# render TEMPLATE [NAME=VALUE...]: templates/TEMPLATE with every ${NAME} in it replaced, to
# stdout. The values are the NAME=VALUE arguments, else the script's variables of that name
# (STATE_DIR, CONF_DIR, ...); a placeholder with neither is an error. Only the template's own
# ${NAME}s are replaced (envsubst with that list), nothing else that looks like a variable.
render() {
	local name="$1"
	shift
	local tmpl="$TEMPLATES_DIR/$name" names
	[ -f "$tmpl" ] || die "no template $tmpl"
	command -v envsubst >/dev/null || die "envsubst is missing (Debian package gettext-base; 'scripts/cluster up' installs it)"
	# shellcheck disable=SC2016 # literal ${ and }
	names="$(grep -o '\${[A-Za-z_][A-Za-z0-9_]*}' "$tmpl" | tr -d '${}' | sort -u || true)"
	(
		local kv n
		for kv in "$@"; do
			# shellcheck disable=SC2163 # exports the variable named by the argument
			export "$kv"
		done
		for n in $names; do
			[ -n "${!n+set}" ] || die "template $name: \${$n} has no value"
			# shellcheck disable=SC2163
			export "$n"
		done
		# shellcheck disable=SC2016,SC2086 # a literal list of ${NAME}s for envsubst
		envsubst "$(printf '${%s} ' $names)" <"$tmpl"
	)
}

# kubeconfig FILE CERTNAME USER: a kubeconfig for the API server on loopback with the client
# certificate CERTNAME (from $CERT_DIR)
kubeconfig() {
	local file="$1" cert="$2" user="$3"
	render kubeconfig.yaml KC_USER="$user" CA_DATA="$(b64 "$CERT_DIR/ca.crt")" \
		CERT_DATA="$(b64 "$CERT_DIR/$cert.crt")" KEY_DATA="$(b64 "$CERT_DIR/$cert.key")" >"$file"
	chmod 600 "$file"
}

# write_configs NODE_NAME
write_configs() {
	local nname="$1"
	mkdir -p "$CONF_DIR" "$CNI_CONF_DIR" "$CNI_IPAM_DIR"
	kubeconfig "$KUBECONFIG_PATH" admin admin
	kubeconfig "$CONF_DIR/kube-controller-manager.kubeconfig" kube-controller-manager system:kube-controller-manager
	kubeconfig "$CONF_DIR/kube-scheduler.kubeconfig" kube-scheduler system:kube-scheduler
	kubeconfig "$CONF_DIR/kubelet.kubeconfig" kubelet "system:node:$nname"
	kubeconfig "$CONF_DIR/kube-proxy.kubeconfig" kube-proxy system:kube-proxy

	# An admin token too, for curl and quick checks (kubeconfigs use client certificates).
	local token
	token="$(openssl rand -hex 16)"
	echo "$token,admin-token,admin-token,system:masters" >"$CONF_DIR/tokens.csv"
	echo "$token" >"$CONF_DIR/admin.token"
	chmod 600 "$CONF_DIR/tokens.csv" "$CONF_DIR/admin.token"

	# containerd 2 (config version 3). NRI is off (it would open a socket under /var/run/nri).
	render containerd.toml RUNC_BIN="$(command -v runc)" >"$CONF_DIR/containerd.toml"

	# The test registry: plain HTTP on loopback, one user with a fresh password per cluster.
	mkdir -p "$CONF_DIR/certs.d/$REGISTRY_ADDR" "$STATE_DIR/registry"
	render registry-hosts.toml >"$CONF_DIR/certs.d/$REGISTRY_ADDR/hosts.toml"
	openssl rand -hex 16 >"$REGISTRY_PASSWORD_FILE"
	chmod 600 "$REGISTRY_PASSWORD_FILE"
	htpasswd -Bbc "$CONF_DIR/registry.htpasswd" "$REGISTRY_USER" "$(cat "$REGISTRY_PASSWORD_FILE")" 2>/dev/null
	openssl rand -hex 24 >"$WEBHOOK_TOKEN_FILE"
	chmod 600 "$WEBHOOK_TOKEN_FILE"
	render registry.yml REGISTRY_SECRET="$(openssl rand -hex 16)" WEBHOOK_TOKEN="$(cat "$WEBHOOK_TOKEN_FILE")" >"$CONF_DIR/registry.yml"

	render cni.conflist POD_GW="$(pod_gw)" >"$CNI_CONF_DIR/10-rancheros.conflist"
	render kubelet.yaml POD_GW="$(pod_gw)" >"$CONF_DIR/kubelet.yaml"
	render kube-proxy.yaml NODE_NAME="$nname" >"$CONF_DIR/kube-proxy.yaml"
	render dnsmasq.conf POD_GW="$(pod_gw)" >"$CONF_DIR/dnsmasq.conf"
	render audit-policy.yaml >"$CONF_DIR/audit-policy.yaml"
	mkdir -p "$(dirname "$AUDIT_LOG")"
}

# API server flags that depend on the release: MutatingAdmissionPolicy (CEL mutations) is GA
# and on by default since 1.36; on 1.34/1.35 it is beta and off, so turn it on.
apiserver_version_flags() {
	if [ "$K8S_MINOR" -lt 36 ]; then
		echo "--feature-gates=MutatingAdmissionPolicy=true --runtime-config=admissionregistration.k8s.io/v1beta1=true"
	fi
}
