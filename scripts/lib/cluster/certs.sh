# shellcheck shell=bash
# scripts/cluster: the cluster's CA, serving and client certificates, service-account keys
# (openssl, fresh on every `up`).

# gen_certs NODE_IP NODE_NAME: everything into $CERT_DIR
gen_certs() {
	local nip="$1" nname="$2"
	mkdir -p "$CERT_DIR"
	cd "$CERT_DIR" || die "cannot enter $CERT_DIR"
	make_ca rancheros-operator-cluster-ca
	# service-account token signing key
	openssl genrsa -out sa.key 2048 2>/dev/null
	openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
	local sans="IP:127.0.0.1,IP:$KUBERNETES_SVC_IP,IP:$nip,DNS:localhost,DNS:$nname"
	sans="$sans,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.$CLUSTER_DOMAIN"
	sign apiserver "/CN=kube-apiserver" serverAuth "$sans"
	sign admin "/O=system:masters/CN=admin" clientAuth
	sign apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
	sign kube-controller-manager "/CN=system:kube-controller-manager" clientAuth
	sign kube-scheduler "/CN=system:kube-scheduler" clientAuth
	sign kubelet "/O=system:nodes/CN=system:node:$nname" clientAuth
	sign kube-proxy "/CN=system:kube-proxy" clientAuth
	chmod 600 ./*.key
	cd - >/dev/null || true
}

# make_ca CN: ca.key and ca.crt, a new CA (in the current dir)
make_ca() {
	openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 -sha256 \
		-subj "/CN=$1" \
		-addext "basicConstraints=critical,CA:TRUE" \
		-addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
}

# sign NAME SUBJECT EKU [SANS]: NAME.key and NAME.crt signed by the CA (in the current dir)
sign() {
	local name="$1" subj="$2" eku="$3" sans="${4:-}"
	{
		echo "basicConstraints=critical,CA:FALSE"
		echo "keyUsage=critical,digitalSignature,keyEncipherment"
		echo "extendedKeyUsage=$eku"
		if [ -n "$sans" ]; then echo "subjectAltName=$sans"; fi
	} >"$name.ext"
	openssl req -newkey rsa:2048 -nodes -keyout "$name.key" -out "$name.csr" -subj "$subj" 2>/dev/null
	openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -sha256 -days 3650 \
		-extfile "$name.ext" -out "$name.crt" 2>/dev/null
	rm -f "$name.csr" "$name.ext"
}

# b64 FILE: one line of base64, for kubeconfigs
b64() { base64 -w0 <"$1"; }
