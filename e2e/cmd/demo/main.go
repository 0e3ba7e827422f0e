// Command demo shows, on real network namespaces, that a late CNI DEL for
// an old StatefulSet pod frees the new pod's address with calico-ipam
// alone, and cannot with safe-ipam in front. Run it as root:
//
//	go run ./e2e/cmd/demo            # builds what it needs
//	demo -bin bin/                   # uses prebuilt binaries
//
// -bin must hold cnitool, ptp, loopback, linklocal-gateway, safe-ipam and
// calico-ipam (the simulator).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/safe-ipam/safe-ipam/e2e/demo"
	"github.com/safe-ipam/safe-ipam/e2e/harness/testbed"
)

func main() {
	binDir := flag.String("bin", "", "directory with prebuilt binaries (default: build them)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	_, err := demo.Run(ctx, demo.Options{BinDir: *binDir, Out: os.Stdout})
	switch {
	case err == nil:
		return
	case errors.Is(err, testbed.ErrHostUnsuitable):
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		os.Exit(2)
	case errors.Is(err, demo.ErrNotDemonstrated):
		os.Exit(1) // the final line already says what was observed
	default:
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		os.Exit(1)
	}
}
