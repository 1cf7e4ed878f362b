module rancheros-operator/scripts/lib/ocireg

go 1.26.7

require github.com/google/go-containerregistry v0.20.7
