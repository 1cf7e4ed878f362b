# shellcheck shell=bash
# scripts/cluster: the node's images (built by scripts/images, imported into our containerd)
# and the test registry's.

# the pause and runner images, and the operator image when an archive of it is cached
import_node_images() {
	log "importing images ($PAUSE_IMAGE, $RUNNER_IMAGE$([ -s "$IMAGES_CACHE_DIR/operator-dev.tar" ] && echo ", cached $OPERATOR_IMAGE"))"
	local imgs
	imgs="$("$SCRIPTS_DIR/images" base)"
	[ -s "$IMAGES_CACHE_DIR/operator-dev.tar" ] && imgs="$imgs $IMAGES_CACHE_DIR/operator-dev.tar"
	# shellcheck disable=SC2086
	CONTAINERD_ADDRESS="$CONTAINERD_SOCK" "$SCRIPTS_DIR/images" import $imgs
}

# Two names of the runner in the test registry: one pulled with a secret, one never pulled
# (the node must not have it).
push_test_images() {
	REGISTRY_CREDS="$REGISTRY_USER:$(cat "$REGISTRY_PASSWORD_FILE")" "$SCRIPTS_DIR/images" push-runner \
		"$REGISTRY_ADDR/private/runner:with-secret" "$REGISTRY_ADDR/private/runner:without-secret" ||
		fail_with_log docker-registry "pushing the runner image to the test registry failed"
}

cmd_image() {
	need_root
	if all_alive; then
		CONTAINERD_ADDRESS="$CONTAINERD_SOCK" "$SCRIPTS_DIR/images" operator --import >/dev/null
	else
		"$SCRIPTS_DIR/images" operator >/dev/null
		log "cluster is not up: built the image archive only; 'scripts/cluster up' imports it"
	fi
}

cmd_images() {
	ctr --address "$CONTAINERD_SOCK" -n k8s.io images ls -q | grep -v '^sha256:'
}
