package etcdstore

import (
	"strings"

	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// The store's keys, every one under the configured prefix. The layout is
// persistent data, read by every node of a cluster and every version of
// safe-ipam: change it only with a migration.
//
//	<prefix>/attachments/<network>/<node>/<cid>/<ifname>    -> the record
//	<prefix>/addresses/<network>/<address>                  -> key of the record holding the address
//	<prefix>/quarantine/<network>/holder/<node>/<cid>/<ifname>/<node>/<cid>/<ifname> -> the Quarantine
//	<prefix>/quarantine/<network>/attachment/<node>/<cid>/<ifname>                 -> key of the holder's record
//	<prefix>/sweeps/<network>/leader/<lease>                -> the node leading the sweeps (etcd's election)
//	<prefix>/sweeps/<network>/gone/<node>                   -> when a sweep first found node gone (RFC 3339)
//
// The node in a record's key lets a node list only its own records:
// every node of a cluster shares the store when it is Calico's etcd. The
// address index is cluster-wide, as Calico's addresses are. A quarantine
// has two keys: one under its holder's record path, which the holder's
// DEL lists in the Txn that marks it, and one under the quarantined
// attachment, which that attachment's DEL and ADD check in theirs. The
// values are in codec.go.

// attachmentsRoot follows the store's prefix in every record's key.
const attachmentsRoot = "/attachments/"

// RecordPrefix is the prefix of network's records on every node (of
// every network's when network is ""), ending in "/".
func RecordPrefix(prefix, network string) string {
	return networkPrefix(prefix+attachmentsRoot, network)
}

// RecordKey is the key of the record of att written on node.
func RecordKey(prefix, node string, att record.Attachment) string {
	return RecordPrefix(prefix, att.Network) + attachmentPath(node, att)
}

// AddressPrefix is the prefix of network's address index entries (of
// every network's when network is ""), ending in "/".
func AddressPrefix(prefix, network string) string {
	return networkPrefix(prefix+"/addresses/", network)
}

// AddressKey is the index key of addr ("10.0.0.1" or "10.0.0.1/26") in network.
func AddressKey(prefix, network, addr string) string {
	if a, ok := record.ParseAddr(addr); ok {
		addr = a.String()
	}
	return AddressPrefix(prefix, network) + addr
}

// QuarantinePrefix is the prefix of both keys of network's quarantines
// (of every network's when network is ""), ending in "/".
func QuarantinePrefix(prefix, network string) string {
	return networkPrefix(prefix+"/quarantine/", network)
}

// HolderPrefix is the prefix of the quarantines tied to the record of
// network at recordKey, ending in "/".
func HolderPrefix(prefix, network, recordKey string) string {
	return QuarantinePrefix(prefix, network) + "holder/" + strings.TrimPrefix(recordKey, RecordPrefix(prefix, network)) + "/"
}

func networkPrefix(root, network string) string {
	if network == "" {
		return root
	}
	return root + network + "/"
}

// attachmentPath names att of node in every key: <node>/<cid>/<ifname>.
func attachmentPath(node string, att record.Attachment) string {
	return node + "/" + att.ContainerID + "/" + att.IfName
}

// key validates att and this store's node, which name the record's key.
func (s *Store) key(att record.Attachment) (string, error) {
	if err := att.Validate(); err != nil {
		return "", err
	}
	if err := record.ValidateNode(s.node); err != nil {
		return "", err
	}
	return RecordKey(s.prefix, s.node, att), nil
}

// holderPrefix lists the quarantines tied to the record of network at key.
func (s *Store) holderPrefix(network, key string) string {
	return HolderPrefix(s.prefix, network, key)
}

// tiedKey is the holder-side key of q, tied to the record of network at
// holderKey.
func (s *Store) tiedKey(network, holderKey string, q record.Quarantine) string {
	return s.holderPrefix(network, holderKey) + attachmentPath(q.Node, q.Attachment)
}

// quarantinedKey marks att of node as quarantined.
func (s *Store) quarantinedKey(node string, att record.Attachment) string {
	return QuarantinePrefix(s.prefix, att.Network) + "attachment/" + attachmentPath(node, att)
}

// storePrefix holds every key of the store.
func storePrefix(prefix string) string { return prefix + "/" }

// listPrefix holds the records a listing reads: of network ("" every
// network) on node ("" every node; only within one network).
func listPrefix(prefix, network, node string) string {
	from := RecordPrefix(prefix, network)
	if network != "" && node != "" {
		from += node + "/"
	}
	return from
}

// tiedPrefix holds the holder-side keys of network's quarantines (of
// node's holders only, unless node is ""); for every network ("") it
// holds both sides, which parseTiedKey tells apart.
func tiedPrefix(prefix, network, node string) string {
	from := QuarantinePrefix(prefix, network)
	if network != "" {
		from += "holder/"
		if node != "" {
			from += node + "/"
		}
	}
	return from
}

// parseRecordKey reads the attachment and node a record's key names.
// Its parts are cut from key, with no list of them: an audit reads a
// million keys.
func parseRecordKey(prefix, key string) (record.Attachment, string, bool) {
	path, ok := cutRecordRoot(prefix, key)
	if !ok {
		return record.Attachment{}, "", false
	}
	var parts [4]string
	for i := range 3 {
		if parts[i], path, ok = strings.Cut(path, "/"); !ok {
			return record.Attachment{}, "", false
		}
	}
	if strings.Contains(path, "/") {
		return record.Attachment{}, "", false
	}
	parts[3] = path
	return record.Attachment{Network: parts[0], ContainerID: parts[2], IfName: parts[3]}, parts[1], true
}

// cutRecordRoot is key below every network's records, if it is there.
func cutRecordRoot(prefix, key string) (string, bool) {
	if !strings.HasPrefix(key, prefix) || !strings.HasPrefix(key[len(prefix):], attachmentsRoot) {
		return "", false
	}
	return key[len(prefix)+len(attachmentsRoot):], true
}

// recordPath is the key of a listed record below every network's
// records (<network>/<node>/<cid>/<ifname>), and the network it names.
func recordPath(prefix, key string) (path, network string) {
	path, ok := cutRecordRoot(prefix, key)
	if !ok {
		path = key
	}
	network, _, _ = strings.Cut(path, "/")
	return path, network
}

// parseTiedKey reads, from the holder-side key of a quarantine, the
// network and the holder's recordPath.
func parseTiedKey(prefix, key string) (network, holderPath string, ok bool) {
	parts := strings.Split(strings.TrimPrefix(key, QuarantinePrefix(prefix, "")), "/")
	if len(parts) != 8 || parts[1] != "holder" {
		return "", "", false
	}
	return parts[0], parts[0] + "/" + strings.Join(parts[2:5], "/"), true
}

// namedAttachment is the attachment of network the last two parts of a
// record's key name, as far as a key that is not one can be read.
func namedAttachment(key, network string) record.Attachment {
	parts := strings.Split(key, "/")
	att := record.Attachment{Network: network}
	if len(parts) >= 2 {
		att.ContainerID, att.IfName = parts[len(parts)-2], parts[len(parts)-1]
	}
	return att
}

// namesQuarantine says whether key, a holder-side key, ends in the
// attachment q names.
func namesQuarantine(key string, q record.Quarantine) bool {
	return strings.HasSuffix(key, "/"+attachmentPath(q.Node, q.Attachment))
}

// sweepsPrefix holds what the sweeps of network's records keep.
func sweepsPrefix(prefix, network string) string { return prefix + "/sweeps/" + network + "/" }

// leaderPrefix is the election of the process that sweeps network.
func leaderPrefix(prefix, network string) string { return sweepsPrefix(prefix, network) + "leader/" }

// gonePrefix holds the nodes sweeps of network found gone.
func gonePrefix(prefix, network string) string { return sweepsPrefix(prefix, network) + "gone/" }

// gracePrefix holds, for each node noted gone, a key tied to a lease of
// the sweep's grace: gone once the grace has passed.
func gracePrefix(prefix, network string) string { return sweepsPrefix(prefix, network) + "grace/" }
