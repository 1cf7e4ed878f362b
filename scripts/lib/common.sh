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
		DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 {APT_LOCK_FD}>&- || die "apt-get update failed"
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
	# One apt at a time among our scripts (scripts/test builds the operator image while the
	# cluster comes up: two of them may install at once). apt and dpkg do not get the
	# descriptor: nothing they start may keep the lock.
	local lock
	exec {lock}>/run/rancheros-operator-apt.lock
	if ! flock -n "$lock"; then
		log "another of our scripts is installing packages; waiting for it"
		flock "$lock"
	fi
	APT_LOCK_FD="$lock" apt_update_once
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
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >"$out" 2>&1 {lock}>&- || rc=$?
	if [ "$created_policy" = 1 ]; then rm -f "$policy"; fi
	if [ "$rc" != 0 ]; then
		tail -n 30 "$out" >&2
		rm -f "$out"
		die "apt-get install ${missing[*]} failed"
	fi
	rm -f "$out"
	exec {lock}>&-
}

# Packages the scripts and the tests call on the host, beyond the toolchains the machine must
# have (Rust with rustfmt and clippy, Go 1.26: README). gcc and libc6-dev: cargo's linker (and
# scripts/build-k8s); curl: the cluster's health checks, scripts/demo; python3-pip and
# python3-venv: scripts/helm (pip download, the chart tools' venv); git: tree_key; time: the test run's CPU seconds (lib/run-tests).
HOST_PKGS="gcc libc6-dev curl ca-certificates python3 python3-pip python3-venv git time"

# Packages the node needs at run time.
NODE_PKGS="runc containernetworking-plugins iptables conntrack openssl ca-certificates busybox-static bash-static procps util-linux iproute2 kmod"

# --- the static build of the tests, the demo and the previous release ----------------------
# static_build_env: exports the settings of scripts/test's build (a variable already set
# wins). Static (crt-static, like the image's binary), so that the image can carry the same
# binary the host runs; --target keeps build scripts and proc macros, which run on this host,
# dynamic. Line tables only: backtraces keep file:line, and the links are much faster than
# with full debug info (docs/testing.md).
static_build_env() {
	export CARGO_BUILD_TARGET="${CARGO_BUILD_TARGET:-x86_64-unknown-linux-gnu}"
	export CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS="${CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS:--C target-feature=+crt-static}"
	export CARGO_PROFILE_DEV_DEBUG="${CARGO_PROFILE_DEV_DEBUG:-line-tables-only}"
}

# --- cargo target dirs shared by several clones (scripts/test, scripts/images) --------------
# A fresh clone reuses the compiled dependencies of the last run. But cargo decides whether the
# crate itself is fresh by comparing its files' mtimes with the artifacts', and its
# fingerprints do not depend on where the clone is: a tree whose files are older than what
# another tree left in the dir would get that tree's binaries. So each dir records the tree it
# last built (.rancheros-tree, a hash of every file), and a build of any other tree first drops
# the crate's own fingerprints (cargo then rebuilds the crate; dependencies and incremental
# caches stay).

# tree_key DIR: a hash of the contents of every file of the source tree at DIR: in a git
# clone the tracked and the untracked but not ignored files (so not target/), else every file
# but .git and target dirs
tree_key() {
	(
		cd "$1" || exit 1
		if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
			git ls-files -z --cached --others --exclude-standard
		else
			find . \( -name .git -o -name target \) -prune -o -type f -print0
		fi | LC_ALL=C sort -zu | xargs -0 -r sha256sum 2>/dev/null
	) | sha256sum | cut -d' ' -f1
}

# shared_target_claim TARGET_DIR SRC_DIR: before a build of SRC_DIR into TARGET_DIR. Holds a
# lock on the dir until this process ends, so that no other clone's build comes in between.
shared_target_claim() {
	local dir="$1" src="$2" key pkg fd
	key="$(tree_key "$src")"
	mkdir -p "$dir"
	exec {fd}>"$dir/.rancheros-tree.lock"
	if ! flock -n "$fd"; then
		log "another build uses $dir; waiting for it"
		flock "$fd"
	fi
	if [ "$(cat "$dir/.rancheros-tree" 2>/dev/null)" != "$key" ]; then
		pkg="$(sed -n 's/^name *= *"\(.*\)"$/\1/p' "$src/Cargo.toml" | head -n 1)"
		[ -n "$pkg" ] || die "no package name in $src/Cargo.toml"
		find "$dir" -maxdepth 4 -type d -path '*/.fingerprint/*' -name "$pkg-*" -prune -exec rm -rf {} + 2>/dev/null || true
	fi
	# (until the build succeeds, the dir holds no tree's record: an interrupted build of one
	# tree must not pass for another's)
	rm -f "$dir/.rancheros-tree"
	echo "$key" >"$dir/.rancheros-tree.pending"
}

# shared_target_built TARGET_DIR: after a successful build (of the claimed tree)
shared_target_built() {
	mv -f "$1/.rancheros-tree.pending" "$1/.rancheros-tree"
}
