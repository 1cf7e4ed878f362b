module rancheros-operator/scripts/lib/token-server

go 1.26.0

require github.com/docker/distribution v2.8.3+incompatible

require (
	github.com/docker/libtrust v0.0.0-20160708172513-aabc10ec26b7 // indirect
	github.com/gorilla/mux v1.8.1 // indirect
	github.com/sirupsen/logrus v1.10.2 // indirect
	golang.org/x/crypto v0.59.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
