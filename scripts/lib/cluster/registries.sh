# shellcheck shell=bash
# scripts/cluster: the two TLS registries of the oci channel tests (paths.sh says which),
# their test CA and the token server. `up` writes and starts them with the rest;
# `scripts/cluster registries` starts the ones that are missing on a cluster already up.

# gen_registry_certs: a test CA of the registries' own (the operator trusts it only through a
# channel's caSecretRef), a serving certificate for loopback, and the token server's signing
# key with the certificate the token registry checks tokens against.
gen_registry_certs() {
	mkdir -p "$REGISTRY_CA_DIR"
	(
		cd "$REGISTRY_CA_DIR" || die "cannot enter $REGISTRY_CA_DIR"
		make_ca rancheros-operator-test-registry-ca
		sign registry "/CN=rancheros-operator-test-registry" serverAuth "IP:127.0.0.1,DNS:localhost"
		# (an EC key in SEC1 PEM: the token server's key loader reads that)
		openssl ecparam -name prime256v1 -genkey -noout -out token-signer.key 2>/dev/null
		openssl req -x509 -new -key token-signer.key -out token-signer.crt -days 3650 -sha256 \
			-subj "/CN=rancheros-operator-test-token-signer" 2>/dev/null
		chmod 600 ./*.key
	)
}

# write_registry_configs: certificates and configs of both registries (the htpasswd file and
# the password of the first registry are shared: write_configs writes them first)
write_registry_configs() {
	gen_registry_certs
	mkdir -p "$STATE_DIR/registry-tls" "$STATE_DIR/registry-token"
	render registry-tls.yml REGISTRY_SECRET="$(openssl rand -hex 16)" >"$CONF_DIR/registry-tls.yml"
	render registry-token.yml REGISTRY_SECRET="$(openssl rand -hex 16)" >"$CONF_DIR/registry-token.yml"
}

registry_tls_ready() {
	curl -sf --max-time 1 --cacert "$REGISTRY_CA_DIR/ca.crt" \
		-u "$REGISTRY_USER:$(cat "$REGISTRY_PASSWORD_FILE")" "https://$REGISTRY_TLS_ADDR/v2/"
}

# The token registry answers 401 with its Bearer challenge until it has a token.
registry_token_ready() {
	curl -s --max-time 1 --cacert "$REGISTRY_CA_DIR/ca.crt" -o /dev/null -D - \
		"https://$REGISTRY_TOKEN_ADDR/v2/" | grep -qi '^www-authenticate: bearer'
}

token_server_ready() {
	curl -sf --max-time 1 --cacert "$REGISTRY_CA_DIR/ca.crt" -u "$REGISTRY_USER:$(cat "$REGISTRY_PASSWORD_FILE")" \
		"https://$TOKEN_SERVER_ADDR/token/?service=$REGISTRY_TOKEN_ADDR&scope=repository:$REGISTRY_USER/x:pull"
}

# start_tls_registries: each one that is not running (the token server from scripts/helm's
# cache: the distribution project's token server, built from its Go module)
start_tls_registries() {
	local ts
	alive registry-tls || {
		start registry-tls /usr/bin/docker-registry serve "$CONF_DIR/registry-tls.yml"
		wait_for registry-tls 30 registry_tls_ready
	}
	alive token-server || {
		ts="$("$SCRIPTS_DIR/helm" tool token-server)" || die "building the token server failed (scripts/helm tool token-server)"
		# It grants a user the repositories under its own name (USER/...), nothing else.
		start token-server "$ts" -addr "$TOKEN_SERVER_ADDR" -realm rancheros-test \
			-passwd "$CONF_DIR/registry.htpasswd" -key "$REGISTRY_CA_DIR/token-signer.key" \
			-tlscert "$REGISTRY_CA_DIR/registry.crt" -tlskey "$REGISTRY_CA_DIR/registry.key"
		wait_for token-server 30 token_server_ready
	}
	alive registry-token || {
		start registry-token /usr/bin/docker-registry serve "$CONF_DIR/registry-token.yml"
		wait_for registry-token 30 registry_token_ready
	}
}

stop_tls_registries() {
	stop_component registry-token
	stop_component token-server
	stop_component registry-tls
}

# scripts/cluster registries: on a cluster that is up, write what is missing and start the
# registries that do not run (a cluster brought up before they existed gets them)
cmd_registries() {
	need_root
	all_alive_but registry-tls registry-token token-server ||
		die "the cluster is not up ('scripts/cluster up' starts everything)"
	[ -s "$CONF_DIR/registry-tls.yml" ] && [ -s "$CONF_DIR/registry-token.yml" ] &&
		[ -s "$REGISTRY_CA_DIR/registry.crt" ] || write_registry_configs
	start_tls_registries
	log "registries up: $REGISTRY_TLS_ADDR (TLS, basic auth), $REGISTRY_TOKEN_ADDR (TLS, token auth from $TOKEN_SERVER_ADDR)"
}

# all_alive_but NAME...: every component but these runs
all_alive_but() {
	local c
	for c in $COMPONENTS; do
		case " $* " in *" $c "*) continue ;; esac
		alive "$c" || return 1
	done
}
