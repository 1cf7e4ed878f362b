//go:build tools

// The real oras CLI (oras.land/oras/cmd/oras), pinned by go.mod and go.sum here, built by
// scripts/helm into the cache: the oci channel tests push channel artifacts with it as a
// publisher does.
package tools

import _ "oras.land/oras/cmd/oras"
