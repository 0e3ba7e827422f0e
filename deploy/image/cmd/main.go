// Command image is `make image`: safe-ipam's image from bin/, without
// Docker. See package image.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"

	"github.com/safe-ipam/safe-ipam/deploy/image"
	"github.com/safe-ipam/safe-ipam/ipam/about"
)

func main() {
	var o image.Options
	out := flag.String("out", "bin/safe-ipam-image.tar", "where to write the image (a docker-archive tarball)")
	flag.StringVar(&o.BinDir, "bin", "bin", "the directory holding safe-ipam, safe-ipam-etcd and safe-ipam-admin, built with CGO_ENABLED=0")
	flag.StringVar(&o.Tag, "tag", about.Image, "the image's name and tag")
	flag.StringVar(&o.Revision, "revision", "", "the build, recorded as the label org.opencontainers.image.revision")
	flag.StringVar(&o.Arch, "arch", runtime.GOARCH, "the binaries' architecture")
	flag.Parse()
	if err := image.Build(o, *out); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
	digest, err := image.Digest(*out, o.Tag)
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
	fmt.Printf("%s: %s\ndigest: %s (pin it as image: REGISTRY/safe-ipam@%s)\n", *out, o.Tag, digest, digest)
}
