# shellcheck shell=bash
# scripts/cluster: where the cluster keeps its state, which components it runs, what it
# reaches. Sourced after lib/common.sh (versions, caches, CIDRs).
# shellcheck disable=SC2034 # the other parts use these

COMPONENTS="dnsmasq etcd kube-apiserver svc-dns kube-controller-manager kube-scheduler containerd docker-registry registry-tls registry-token token-server kubelet kube-proxy"
# Components that run another one's binary (alive() checks the process is that binary).
declare -A COMPONENT_BINARY=([registry-tls]=docker-registry [registry-token]=docker-registry)
CERT_DIR="$STATE_DIR/pki"
CONF_DIR="$STATE_DIR/conf"
AUDIT_LOG="$STATE_DIR/audit/versions.log"
CONTAINERD_ROOT="$STATE_DIR/containerd/root"
CONTAINERD_STATE="$STATE_DIR/containerd/state"
CONTAINERD_SOCK="$STATE_DIR/containerd/containerd.sock"
KUBELET_ROOT="$STATE_DIR/kubelet"
CNI_CONF_DIR="$STATE_DIR/cni/net.d"
CNI_IPAM_DIR="$STATE_DIR/cni/ipam"
RUNC_ROOT="$STATE_DIR/runc"
HOSTINFO="$STATE_DIR/host-before-up"
CNI_BIN_DIR=/usr/lib/cni
# The component configs (rendered by `render`, configs.sh)
TEMPLATES_DIR="$SCRIPTS_DIR/lib/cluster/templates"
# A private image registry on loopback (Debian's docker-registry, basic auth), for the tests
# of channel images pulled with imagePullSecrets. The node pulls from it over plain HTTP.
REGISTRY_ADDR="127.0.0.1:5050"
REGISTRY_USER="rancheros"
REGISTRY_PASSWORD_FILE="$CONF_DIR/registry.password"
# The registry notifies pushes to this address (the tests of the operator's registry
# webhook listen there, one at a time), with this bearer token.
WEBHOOK_ADDR="127.0.0.1:18480"
WEBHOOK_TOKEN_FILE="$CONF_DIR/webhook.token"
# Two more registries for the tests of oci channels (registries.sh), both serving TLS with a
# certificate of their own test CA (not the cluster's): one with basic auth (the same user
# and password), one with the token flow of the distribution spec, its tokens issued by the
# distribution project's token server for that user.
REGISTRY_TLS_ADDR="127.0.0.1:5443"
REGISTRY_TOKEN_ADDR="127.0.0.1:5444"
TOKEN_SERVER_ADDR="127.0.0.1:5445"
REGISTRY_CA_DIR="$CERT_DIR/registry-ca"
# Paths that kubelet/containerd/CNI use no matter what they are told; removed by `down`
# when they did not exist before `up`.
FIXED_HOST_PATHS="/var/log/pods /var/log/containers /var/lib/kubelet /var/lib/cni /run/containerd /var/run/netns /run/netns /etc/cni /opt/cni /opt/containerd"
# our kubectl, containerd, containerd-shim-runc-v2 and ctr first
export PATH="$K8S_BIN_DIR:$CONTAINERD_BIN_DIR:$PATH"
K8S_MINOR="$(sed -E 's/^v1\.([0-9]+)\..*/\1/' <<<"$K8S_VERSION")"

# shellcheck disable=SC2019,SC2018 # host names are ASCII
node_name() { hostname | tr 'A-Z' 'a-z'; }

node_ip() {
	local dev ip
	dev="$(ip -4 route show default 2>/dev/null | awk '{for (i=1;i<NF;i++) if ($i=="dev") {print $(i+1); exit}}')"
	[ -n "$dev" ] && ip="$(ip -4 -o addr show dev "$dev" scope global 2>/dev/null | awk '{split($4,a,"/"); print a[1]; exit}')"
	[ -n "${ip:-}" ] || die "cannot find the node's IPv4 address (no default route); the kubelet needs one"
	echo "$ip"
}

# the pods' gateway: cni0's address, where dnsmasq listens (the pods' nameserver)
pod_gw() { echo "${POD_CIDR%.*/*}.1"; }

kc() { kubectl --kubeconfig "$KUBECONFIG_PATH" "$@"; }
