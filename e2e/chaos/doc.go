// Package chaos shows, with tests that can fail, that safe-ipam loses no
// address and hands none out twice while its process is killed at any
// step, etcd stops amid its calls, the runtime runs ADD and DEL for many
// containers at once, repeats DELs and delivers them late
// (kubernetes/kubernetes#44100).
//
// A history is a sequence of steps a container runtime takes on one to
// three nodes: each step runs one or more CNI calls at once (ADD, DEL, GC
// with cni.dev/valid-attachments), exactly as a runtime execs the plugin,
// against the calico-ipam simulator keeping Calico's data in a real etcd.
// Calls may be armed to crash: safe-ipam, built with -tags crashpoints,
// SIGKILLs itself at the named guard.Step. A step may stop etcd, which
// holds Calico's data and safe-ipam's etcd records, for its whole length
// or amid its calls.
//
// A Model holds what the runtime believes of every attachment (live,
// failed, deleting, deleted, forgotten). After every step the checker
// compares it with Calico's data (calicosim.State) and safe-ipam's
// records:
//
//  1. No address is held by two live attachments, and no live
//     attachment's address is free in Calico (nor held under another
//     handle, nor named by a committed record Calico does not back).
//  2. Once the runtime's DEL or GC of an attachment succeeded, Calico
//     holds nothing for it and no record is kept; after the runtime has
//     deleted every attachment, nothing at all remains.
//  3. No call releases an address of a live attachment it does not name.
//  4. Nothing is blocked: an ADD fails on a fence only while its holder is
//     live or still owed its DEL or GC (never one the runtime deleted, or
//     whose node died), and nothing of a dead node is left at the end.
//
// A violation of 2 is an address lost; of 1 or 3, an address duplicated;
// of 4, safe-ipam worse than Calico alone.
//
// Beyond its pods, a history may kill a node (kube-controllers frees its
// addresses and blocks and deletes its Calico Node; the DaemonSet's gc
// --dead-nodes runs now and then; a pod adopted under its pod name's
// handle may come back under that name on another node), uninstall
// safe-ipam from a node and
// install it again, and upgrade it over records without address index
// entries (TestLifecycle plays each as a script). Machines may share a
// Calico name, be renamed (host or Calico node) while pods run, or lend
// an address of their block to another node's pod, with repair and gc
// --former-node run there (TestMachines, machine.go).
//
// Histories come from a seeded Generator (StatefulSet pods recreated
// under the same name, late and repeated DELs, concurrent workers,
// crashes, outages, GC, sandboxes the runtime forgets) and from Scripts:
// the crash matrix (every crash point, each followed by a retry, a DEL or
// a GC), outages, and regression tests for the bugs it found. The same generator run
// against calico-ipam alone (the control, Calico 2.x handles) must find
// violations, and deliberately broken safe-ipams (Mutants) must be
// caught, or the checker's silence would mean nothing.
//
// TestClaims plays histories on Calico's Kubernetes datastore (the
// ClaimsStore kind, kube.go, claims.go): Calico's data in a real
// kube-apiserver, which also holds the AddressClaims that fence each
// node's records cluster-wide, and each node's records in its file store.
// The API server is stopped (SIGSTOP) for outages; the crash matrix adds
// the claims' own points (claims.Claimed, claims.MarkedClaimed); a
// block's affinity moves to another node (AffinityMove), so that an
// address freed behind a running pod's back is handed across nodes, where
// only the claims fence it. The checker also holds the claims to the
// records: a live attachment's committed addresses are claimed in its
// name, and no claim outlives its attachment's DEL.
//
// TestElection runs the DaemonSet's gc --dead-nodes --every loops of two
// nodes as processes while a third node is dead and a fault plays out in
// their election of the one that sweeps (election.go): a dry-run loop, a
// leader whose sweeps fail, a leader killed mid-sweep, a leader key
// without a lease, a note from a clock behind. The dead node's records
// must still go, within a bound.
//
// TestRegressions replays the safe-ipam bugs this suite found (GC across
// nodes, a commit whose answer was lost, a non-UTF-8 ifname). One needs a
// one-way partition (a Proxy that delivers the store's requests and drops
// the answers), since a stopped etcd answers what it accepted.
//
// Running it:
//
//	go test ./e2e/chaos                   # the short set (make test)
//	make chaos                            # the long mode: cmd/chaos
//	CHAOS_SEED=17 go test ./e2e/chaos -run 'TestHistories$' -v
//	CHAOS_SCRIPT=crash/del-marked/gc go test ./e2e/chaos -run TestCrashPoints -v
//	CHAOS_SEED=3 go test ./e2e/chaos -run 'TestClaims$' -v  # history claims-seed-3
//	go run ./e2e/chaos/cmd/chaos -parts Kubernetes          # the long mode's KDD parts
//	go test ./e2e/chaos -run TestRegressions -v
//	CHAOS_SCRIPT=election/failing-leader go test ./e2e/chaos -run TestElection -v
//	go test ./e2e/chaos -run '^$' -fuzz FuzzRecordNaming
//
// Add CHAOS_TRANSCRIPT=1 with -v to watch every call as it happens.
package chaos
