//go:build !cnionly

package main

import (
	"fmt"
	"os"

	"github.com/safe-ipam/safe-ipam/ipam/adopt"
	"github.com/safe-ipam/safe-ipam/ipam/audit"
	"github.com/safe-ipam/safe-ipam/ipam/doctor"
	"github.com/safe-ipam/safe-ipam/ipam/gc"
	"github.com/safe-ipam/safe-ipam/ipam/install"
)

func runAdmin(args []string) int {
	switch args[0] {
	case "version", "--version", "help", "-h", "--help":
		return runBuiltin(args[0])
	case "audit":
		return audit.Run(args[1:], os.Stdout, os.Stderr, false)
	case "repair":
		return audit.Run(args[1:], os.Stdout, os.Stderr, true)
	case "adopt":
		return adopt.Run(args[1:], os.Stdout, os.Stderr)
	case "gc":
		return gc.Run(args[1:], os.Stdout, os.Stderr)
	case "install":
		return install.RunInstall(args[1:], os.Stdout, os.Stderr)
	case "uninstall":
		return install.RunUninstall(args[1:], os.Stdout, os.Stderr)
	case "doctor":
		return doctor.Run(args[1:], os.Stdout, os.Stderr)
	}
	fmt.Fprintf(os.Stderr, "safe-ipam: unknown command %q\n\n%s", args[0], usage)
	return 2
}
