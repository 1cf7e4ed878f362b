//go:build tools

// The distribution project's token server (contrib/token-server of
// github.com/docker/distribution, the registry's import path before v3, whose module no
// longer ships contrib/), pinned by go.mod and go.sum here, built by scripts/helm into the
// cache: scripts/cluster runs it for the token-auth test registry.
package tools

import _ "github.com/docker/distribution/contrib/token-server"
