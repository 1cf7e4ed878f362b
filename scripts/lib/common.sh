# shellcheck shell=bash
# Shared settings and helpers for scripts/cluster, scripts/build-k8s, scripts/images, scripts/test.
# Source it; do not run it.

set -euo pipefail

ROOT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SCRIPTS_DIR="$ROOT_DIR/scripts"

# --- versions (the cache is keyed by these) ---------------------------------
# Kubernetes, built from the k8s.io/kubernetes Go module (scripts/build-k8s). Override with
# K8S_VERSION=v1.X.Y (1.34 or newer: the cluster's flags and configs are written for those).
K8S_DEFAULT_VERSION="v1.37.2"
K8S_VERSION="${K8S_VERSION:-$K8S_DEFAULT_VERSION}"
# Bump when the build recipe (patches, flags, binary list) changes: it re-keys the cache.
K8S_RECIPE_REV="3"
K8S_BINARIES="kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl"
# etcd and containerd, built the same way (go.etcd.io/etcd/server/v3,
# github.com/containerd/containerd/v2), each cached by version + recipe revision.
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
ETCD_RECIPE_REV="1"
CONTAINERD_VERSION="${CONTAINERD_VERSION:-v2.4.2}"
CONTAINERD_RECIPE_REV="1"
CONTAINERD_BINARIES="containerd containerd-shim-runc-v2 ctr"

# --- locations --------------------------------------------------------------
CACHE_ROOT="${RANCHEROS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rancheros-operator}"
K8S_CACHE_DIR="$CACHE_ROOT/k8s-$K8S_VERSION-r$K8S_RECIPE_REV"
K8S_BIN_DIR="$K8S_CACHE_DIR/bin"
ETCD_CACHE_DIR="$CACHE_ROOT/etcd-$ETCD_VERSION-r$ETCD_RECIPE_REV"
CONTAINERD_CACHE_DIR="$CACHE_ROOT/containerd-$CONTAINERD_VERSION-r$CONTAINERD_RECIPE_REV"
CONTAINERD_BIN_DIR="$CONTAINERD_CACHE_DIR/bin"
# Go's module and build caches: kept across builds (and by `scripts/cluster down`), so a
# rebuild (new recipe revision, --force) compiles only what changed.
GO_CACHE_ROOT="$CACHE_ROOT/go"
IMAGES_CACHE_DIR="$CACHE_ROOT/images"

STATE_DIR="${RANCHEROS_CLUSTER_STATE:-/var/lib/rancheros-operator-cluster}"
KUBECONFIG_PATH="$STATE_DIR/kubeconfig"
LOG_DIR="$STATE_DIR/logs"
PID_DIR="$STATE_DIR/pids"

# --- images -----------------------------------------------------------------
PAUSE_IMAGE="rancheros-pause:3.4.1"
RUNNER_IMAGE="rancheros-runner:test"
OPERATOR_IMAGE="rancheros-operator:dev"
IMAGE_REV="1" # bump to rebuild the cached pause/runner archives

# --- cluster network --------------------------------------------------------
SERVICE_CIDR="10.96.0.0/12"
KUBERNETES_SVC_IP="10.96.0.1"
DNS_SVC_IP="10.96.0.10"
POD_CIDR="10.88.0.0/16"
CLUSTER_DOMAIN="cluster.local"
CNI_BRIDGE="cni0"
APISERVER_PORT=6443

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() {
	printf '\nERROR: %s\n\n' "$*" >&2
	exit 1
}

need_root() {
	[ "$(id -u)" = 0 ] || die "this must run as root (it runs containerd, kubelet and iptables)"
}

# apt-get update once per process tree (exported marker), then install what is missing.
APT_UPDATED="${APT_UPDATED:-}"
apt_update_once() {
	if [ -z "$APT_UPDATED" ]; then
		log "apt-get update"
		DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 || die "apt-get update failed"
		APT_UPDATED=1
		export APT_UPDATED
	fi
}

# ensure_pkgs pkg... : install Debian packages that are not installed yet.
ensure_pkgs() {
	local missing=() p
	for p in "$@"; do
		if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
			missing+=("$p")
		fi
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	apt_update_once
	log "apt-get install ${missing[*]}"
	# No init system runs services here; keep package scripts from trying to start any.
	local policy=/usr/sbin/policy-rc.d created_policy=0
	if [ ! -e "$policy" ]; then
		printf '#!/bin/sh\nexit 101\n' >"$policy"
		chmod +x "$policy"
		created_policy=1
	fi
	local rc=0 out
	out="$(mktemp)"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >"$out" 2>&1 || rc=$?
	if [ "$created_policy" = 1 ]; then rm -f "$policy"; fi
	if [ "$rc" != 0 ]; then
		tail -n 30 "$out" >&2
		rm -f "$out"
		die "apt-get install ${missing[*]} failed"
	fi
	rm -f "$out"
}

# Packages the node needs at run time.
NODE_PKGS="runc containernetworking-plugins iptables conntrack openssl ca-certificates busybox-static bash-static procps util-linux iproute2 kmod"
