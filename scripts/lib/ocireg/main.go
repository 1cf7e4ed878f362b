// ocireg serves go-containerregistry's registry (pkg/registry, the registry crane's own
// tests run against) with the OCI 1.1 referrers API turned on, in memory, on loopback:
// the mirror tests copy referrers from and to it. Debian's docker-registry has no
// referrers API, so it serves the other side: the referrers tag schema.
//
//	ocireg [--address 127.0.0.1:0]   prints "listening on HOST:PORT" once it accepts
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
)

func main() {
	address := flag.String("address", "127.0.0.1:0", "address to listen on")
	flag.Parse()
	listener, err := net.Listen("tcp", *address)
	if err != nil {
		log.Fatalf("listen on %s: %v", *address, err)
	}
	fmt.Fprintf(os.Stdout, "listening on %s\n", listener.Addr())
	server := &http.Server{
		ReadHeaderTimeout: 10 * time.Second,
		Handler:           registry.New(registry.WithReferrersSupport(true), registry.Logger(log.New(os.Stderr, "", log.LstdFlags))),
	}
	log.Fatal(server.Serve(listener))
}
