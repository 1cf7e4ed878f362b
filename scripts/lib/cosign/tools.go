//go:build tools

// The real cosign CLI (github.com/sigstore/cosign/v2/cmd/cosign), pinned by go.mod and
// go.sum here, built by scripts/helm into the cache: the oci tests sign channel images
// with it as a publisher would.
package tools

import _ "github.com/sigstore/cosign/v2/cmd/cosign"
