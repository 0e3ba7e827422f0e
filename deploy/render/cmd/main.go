// Command render prints a deploy/ manifest for other CNI dirs. See
// package render. Example:
//
//	go run ./deploy/render/cmd --cni-bin-dir /var/lib/rancher/k3s/data/current/bin \
//	  --cni-conf-dir /var/lib/rancher/k3s/agent/etc/cni/net.d deploy/safe-ipam.yaml > safe-ipam.yaml
//	go run ./deploy/render/cmd --mode takeover deploy/safe-ipam-uninstall.yaml > safe-ipam-uninstall.yaml
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/safe-ipam/safe-ipam/deploy/render"
)

func main() {
	var d render.Dirs
	flag.StringVar(&d.BinDir, "cni-bin-dir", render.DefaultBinDir, "the nodes' CNI bin dir")
	flag.StringVar(&d.ConfDir, "cni-conf-dir", render.DefaultConfDir, "the nodes' CNI config dir")
	mode := flag.String("mode", "own-conflist", `"takeover", "conflist" or "own-conflist" (deploy/'s own): the install and watch containers run --mode=<mode>, and they and uninstall's container mount the CNI config dir writable, but in takeover; only a manifest that installs or uninstalls takes it`)
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "Usage: render [--cni-bin-dir DIR] [--cni-conf-dir DIR] [--mode takeover|conflist|own-conflist] MANIFEST\n\nPrints MANIFEST (one of deploy/) for nodes with these CNI dirs, and for the install mode.")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	b, err := os.ReadFile(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "render:", err)
		os.Exit(2)
	}
	out, err := render.Manifest(string(b), d)
	modeSet := false
	flag.Visit(func(f *flag.Flag) { modeSet = modeSet || f.Name == "mode" })
	if err == nil && modeSet {
		out, err = render.ForMode(out, *mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "render:", err)
		os.Exit(2)
	}
	fmt.Print(out)
}
