package install

import (
	"context"

	"github.com/safe-ipam/safe-ipam/ipam/failnote"
)

// NodeCheck is safe-ipam doctor's answer about the node: with remote,
// everything (the record store and Calico's datastore as well), else what
// the node's own files say, asking no one.
type NodeCheck func(ctx context.Context, n Node, remote bool) (Verdict, error)

// Verdict is one check's answer.
type Verdict struct {
	Protected bool
	// Unanswered says that the record store or Calico's datastore did not
	// answer (a remote check only): no verdict on what they hold.
	Unanswered bool
	// Problems say why the node is not protected.
	Problems []string
	// Stores are the records and quarantines by network (remote only).
	Stores []StoreCount
	// Failing is the newest of the CNI path's failure notes (package
	// failnote), nil when there is none.
	Failing *failnote.Note
}

// StoreCount is one network's records and quarantines on the node.
type StoreCount struct {
	Network              string
	Records, Quarantines int
}
