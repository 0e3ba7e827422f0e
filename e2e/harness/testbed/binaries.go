// Package testbed runs safe-ipam end to end on real parts: cnitool, the
// reference ptp and loopback plugins, network namespaces made with
// `ip netns`, and Calico's data in a real etcd. The e2e tests and the demo
// share it.
package testbed

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/safe-ipam/safe-ipam/e2e/harness/gobuild"
	"github.com/safe-ipam/safe-ipam/ipam/builds"
)

// Names of the programs a CNI_PATH built by the testbed holds.
const (
	Cnitool          = "cnitool"
	PTP              = "ptp"
	Loopback         = "loopback"
	LinkLocalGateway = "linklocal-gateway"
	SafeIPAM         = builds.CNIBinary
	SafeIPAMAdmin    = builds.AdminBinary
	SafeIPAMEtcd     = builds.EtcdBinary
	CalicoIPAM       = "calico-ipam"
	// CalicoSim is the simulator, built beside a real calico-ipam to play
	// Calico's main plugin (see MainPlugin).
	CalicoSim = "calico-sim"
)

// Programs lists every program a testbed CNI_PATH must hold.
var Programs = []string{Cnitool, PTP, Loopback, LinkLocalGateway, SafeIPAM, SafeIPAMEtcd, SafeIPAMAdmin, CalicoIPAM}

const module = "github.com/safe-ipam/safe-ipam"

// packages maps each program to the Go package it is built from.
var packages = map[string]string{
	Cnitool:          "github.com/containernetworking/cni/cnitool",
	PTP:              "github.com/containernetworking/plugins/plugins/main/ptp",
	Loopback:         "github.com/containernetworking/plugins/plugins/main/loopback",
	LinkLocalGateway: module + "/e2e/cmd/linklocal-gateway",
	SafeIPAM:         module + "/plugin/" + SafeIPAM,
	SafeIPAMAdmin:    module + "/plugin/" + SafeIPAMAdmin,
	SafeIPAMEtcd:     module + "/plugin/" + SafeIPAMEtcd,
	CalicoIPAM:       module + "/e2e/cmd/calico-ipam", // the simulator
}

// Binaries is a directory used as CNI_PATH; cnitool is run from it too.
type Binaries struct {
	Dir string
	// RealCalico is true when calico-ipam is a real Calico binary rather
	// than the simulator.
	RealCalico bool
}

// Path returns the full path of a program.
func (b Binaries) Path(program string) string { return filepath.Join(b.Dir, program) }

// MainPlugin is the binary a test node installs as Calico's main plugin,
// calico: the multi-call simulator, as calico-ipam is. With a real
// calico-ipam it stays the simulator, since Calico's own main plugin
// needs what calico-node and a Kubernetes API give it (the nodename file,
// ClusterInformation, the pod), which only e2e/cluster sets up; the
// simulator's main plugin execs calico-ipam from CNI_PATH, so the real one
// still does every IPAM call.
func (b Binaries) MainPlugin() string {
	if b.RealCalico {
		return b.Path(CalicoSim)
	}
	return b.Path(CalicoIPAM)
}

// Build compiles every program into dir. With calicoIPAM set, that binary
// is linked in as calico-ipam instead of building the simulator. It must
// run inside the safe-ipam module (go test and go run do).
func Build(ctx context.Context, dir, calicoIPAM string) (Binaries, error) {
	b := Binaries{Dir: dir, RealCalico: calicoIPAM != ""}
	// One go build for every package whose directory is named like its
	// program, one more for each of the rest: fewer link steps.
	var sameName []string
	for _, prog := range Programs {
		switch {
		case prog == CalicoIPAM && b.RealCalico:
			if err := linkCalico(calicoIPAM, b.Path(CalicoIPAM)); err != nil {
				return Binaries{}, err
			}
			if err := (gobuild.Build{Out: b.Path(CalicoSim), Pkgs: []string{packages[CalicoIPAM]}}).Run(ctx); err != nil {
				return Binaries{}, err
			}
		case filepath.Base(packages[prog]) == prog:
			sameName = append(sameName, packages[prog])
		default:
			if err := (gobuild.Build{Out: b.Path(prog), Pkgs: []string{packages[prog]}}).Run(ctx); err != nil {
				return Binaries{}, err
			}
		}
	}
	if err := (gobuild.Build{Out: dir + string(filepath.Separator), Pkgs: sameName}).Run(ctx); err != nil {
		return Binaries{}, err
	}
	return b, nil
}

// Use takes prebuilt programs from dir, for example the Makefile's bin/,
// with the simulator as calico-ipam.
func Use(dir string) (Binaries, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return Binaries{}, fmt.Errorf("binaries directory %s: %w", dir, err)
	}
	b := Binaries{Dir: abs}
	for _, prog := range Programs {
		if err := executable(b.Path(prog)); err != nil {
			return Binaries{}, fmt.Errorf("binaries directory %s lacks %s (build it with: go build -o %s/%s %s): %w",
				abs, prog, abs, prog, packages[prog], err)
		}
	}
	return b, nil
}

// linkCalico makes the real binary reachable as calico-ipam. A symlink
// keeps argv[0] "calico-ipam", which the multi-call calico binary needs.
func linkCalico(src, dst string) error {
	abs, err := filepath.Abs(src)
	if err != nil {
		return fmt.Errorf("CALICO_IPAM=%s: %w", src, err)
	}
	if err := executable(abs); err != nil {
		return fmt.Errorf("CALICO_IPAM=%s: %w", src, err)
	}
	if err := os.Symlink(abs, dst); err != nil {
		return fmt.Errorf("linking %s as %s: %w", abs, dst, err)
	}
	return nil
}

func executable(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", path)
	}
	return nil
}
