# safe-ipam: see README.md. `make build` puts binaries in bin/.
GO       ?= go
BIN      ?= bin
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# -s -w: no symbol table or DWARF (stack traces keep working). The plugin
# is exec'd on every pod start and stop, and the smaller file starts
# faster (see docs/performance.md, "Cost").
LDFLAGS  := -s -w -X main.Version=$(VERSION)
# grpcnotrace: gRPC's request tracing (golang.org/x/net/trace, which
# brings html/template) is never turned on here, and its package init
# cost every CNI call about 0.2 ms (docs/performance.md).
TAGS     := grpcnotrace
PKGS     := ./...

# The simulator, cnitool and the reference plugins are built next to
# safe-ipam for the demo; tests build their own copies in temp dirs.
TOOLS := github.com/containernetworking/cni/cnitool \
         github.com/containernetworking/plugins/plugins/main/ptp \
         github.com/containernetworking/plugins/plugins/main/loopback \
         github.com/containernetworking/plugins/plugins/ipam/host-local

.PHONY: all build image tools test unit e2e e2e-runtime e2e-kubernetes e2e-cluster kube-binaries helm lint demo bench scale scale-audit scale-detect chaos clean

all: build

# safe-ipam is the CNI binary (only what a CNI call over the file store and
# Kubernetes needs); safe-ipam-etcd is its build with the etcd client, which
# safe-ipam hands the calls over etcd to; safe-ipam-admin holds the admin
# commands, which safe-ipam hands to it. One main each.
# Static (CGO_ENABLED=0), as the image's: install copies the CNI binary
# onto the node, whose libc it must not depend on.
build:
	CGO_ENABLED=0 $(GO) build -tags $(TAGS) -ldflags "$(LDFLAGS)" -o $(BIN)/ ./plugin/safe-ipam ./plugin/safe-ipam-etcd ./plugin/safe-ipam-admin

# The image deploy/safe-ipam.yaml runs, without Docker: the three binaries,
# static (install copies the CNI binary and its etcd build onto nodes, whose libc it must
# not depend on), in one layer, as a docker-archive tagged with the
# release the manifest pins (ipam/about.Release). Load it with
# `ctr -n k8s.io images import` or `docker load`, or push it with crane.
image:
	CGO_ENABLED=0 $(GO) build -trimpath -tags $(TAGS) -ldflags "$(LDFLAGS)" -o $(BIN)/image/ ./plugin/safe-ipam ./plugin/safe-ipam-etcd ./plugin/safe-ipam-admin
	$(GO) run ./deploy/image/cmd -bin $(BIN)/image -revision $(VERSION) -out $(BIN)/safe-ipam-image.tar

tools:
	$(GO) build -o $(BIN)/ ./e2e/cmd/calico-ipam ./e2e/cmd/demo ./e2e/cmd/linklocal-gateway $(TOOLS)

# Everything: lint, unit tests, fuzz seed corpora, and the e2e suite
# (root and `ip netns` needed; with CI=true e2e fails instead of skipping).
# The cluster suite (e2e/cluster: one-node and three-node scenarios) is
# one of the packages, and the longest (about 20 minutes on 2 cores: the one-node
# scenarios one at a time, then the ten three-node ones, on etcd and on
# Calico's Kubernetes datastore, two at a time).
test: lint kube-binaries helm
	$(GO) test -count=1 -timeout 40m $(PKGS)

# Everything but what needs root: the e2e suites and the chaos suite.
unit: kube-binaries helm
	$(GO) test -count=1 $$($(GO) list ./... | grep -v -e '/e2e$$' -e '/e2e/chaos' -e '/e2e/runtime$$' -e '/e2e/cluster$$' -e '/e2e/harness/kubenode$$')

e2e:
	$(GO) test -count=1 -timeout 20m -v ./e2e/

# The kubelet's path alone: a real containerd driven over the CRI API
# (root; containerd and runc from scripts/install-deps.sh). CALICO_IPAM=path
# runs it against a real calico-ipam.
e2e-runtime:
	$(GO) test -count=1 -timeout 20m -v ./e2e/runtime/...

# The real Kubernetes commands the tests start (kube-apiserver; kubelet,
# kube-controller-manager and kube-scheduler for the clusters),
# built once per version into a cache outside the tree: 5 to 12 minutes
# cold on 2 cores, then seconds. See scripts/kube-apiserver.sh.
kube-binaries:
	@for c in kube-apiserver kubelet kube-controller-manager kube-scheduler; do \
	  bash scripts/kube-apiserver.sh $$c >/dev/null || exit 1; done

# safe-ipam on real Kubernetes clusters (root) of one node and of three:
# each node's kubelet and containerd, and the control plane, in private
# namespaces, Calico's layout on every node, safe-ipam deployed by
# deploy/safe-ipam.yaml from the image built here. RUN=<regexp> runs some
# scenarios alone (RUN=TestMissingDEL, RUN=TestPartitionAndReturn);
# CALICO_CNI=/path/to/calico runs them with Calico's real binary, and
# CALICO_KUBE_CONTROLLERS=/path/to/kube-controllers with Calico's real
# kube-controllers as the outside releaser.
RUN ?= .
e2e-cluster: kube-binaries
	$(GO) test -count=1 -timeout 40m -v -run '$(RUN)' ./e2e/harness/kubenode/ ./e2e/cluster/

# The tests against a real kube-apiserver (named TestKube*, TestKDD*,
# TestPodsSource*): the harness, pods as liveness, Calico's Kubernetes
# datastore (the simulator's KDD mode, the datastore contract, audit,
# repair and adopt on KDD) and the e2e scenarios on KDD, control and
# safe-ipam (root). CALICO_IPAM=path runs the scenarios against a real
# calico-ipam.
e2e-kubernetes: kube-binaries
	$(GO) test -count=1 -timeout 20m -v -run '^Test(Kube|KDD|PodsSource|RekeyToPodHandle)' ./e2e/harness/kubetest/... ./ipam/admin/liveness/... ./ipam/admin/audit/... ./ipam/calico/datastore/... ./ipam/admin/adopt/... ./e2e/harness/calicosim/... ./e2e/harness/testbed/... ./e2e/

# The helm the chart's tests run (deploy/helm_test.go), built once per
# version from the tools module e2e/tools/helm. See scripts/helm.sh.
helm:
	@bash scripts/helm.sh >/dev/null

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) vet -tags crashpoints $(PKGS)
	$(GO) vet -tags floorfile ./e2e/cmd/ipam-floor

# The long chaos run: many random histories (seed printed for replay),
# the whole crash matrix, outages and every mutant. Its last line is
# "chaos: <n> histories, <n> crash points, <n> outages, <n> lost, <n> duplicated".
chaos: kube-binaries
	$(GO) run ./e2e/chaos/cmd/chaos

# The first run fetches the Go modules (through the module proxy) and
# compiles everything: minutes, not seconds (README.md says how long).
demo:
	@echo "demo: building safe-ipam's binaries (safe-ipam, safe-ipam-etcd, safe-ipam-admin) into $(BIN)/"
	@echo "demo: the first run fetches Go modules and compiles for several minutes; later runs take seconds"
	@$(MAKE) --no-print-directory build
	@echo "demo: building the demo's tools: the calico-ipam simulator, the demo, cnitool and the CNI plugins it runs (ptp, loopback, host-local)"
	@$(MAKE) --no-print-directory tools
	bash scripts/demo.sh $(BIN)

clean:
	rm -rf $(BIN)

# Cost on top of calico-ipam (the simulator, or $CALICO_IPAM), side by side;
# writes $(BIN)/bench.json. Not part of `make test`.
bench:
	$(GO) run ./e2e/cmd/bench -out $(BIN)/bench.json

# What the DaemonSet's periodic work costs Calico's datastore: a real etcd
# (DATASTORE=etcdv3) or kube-apiserver (DATASTORE=kubernetes) with NODES x
# PODS of Calico's Nodes and safe-ipam's records, several simulated nodes
# running deploy/safe-ipam.yaml's commands, the datastore's own counters,
# and the steady state extrapolated to 1,000 and 5,000 nodes with its
# formula (docs/performance.md, "At scale"). Not part of `make test`; its
# small configurations are (e2e/scale).
NODES     ?= 500
PODS      ?= 30
DATASTORE ?= etcdv3
scale:
	$(GO) run ./e2e/cmd/scale -datastore $(DATASTORE) -nodes $(NODES) -pods $(PODS)

# `safe-ipam audit --json` of AUDIT allocations and records planted in
# Calico's etcd (its layout, as make bench plants them): wall time and
# peak RSS, against issue 32's target of 1,000,000 in 30 s and 1 GiB.
AUDIT ?= 1000000
scale-audit:
	$(GO) run ./e2e/cmd/scale -audit $(AUDIT)

# One round of `safe-ipam detect` (the cluster-wide check: one instance
# per cluster, every 2 minutes) against NODES x PODS running pods in a real
# kube-apiserver and their addresses in Calico's DATASTORE (a real etcd,
# or the API server's CRDs): requests, bytes, wall time and peak RSS, and
# the load at its period extrapolated to 5,000 x 100 (docs/performance.md).
# NODES=5000 PODS=100 measures 500,000 pods directly (slow: planting them
# takes most of the time).
scale-detect:
	$(GO) run ./e2e/cmd/scale -detect -datastore $(DATASTORE) -nodes $(NODES) -pods $(PODS)
