package calico

import (
	"fmt"
	"strings"
)

// The values below are BRIEF.md's "Real etcd data written by calico-ipam",
// with the block's elided arrays written out.
const (
	briefPool     = `{"kind":"IPPool","apiVersion":"projectcalico.org/v3","metadata":{"name":"default-ipv4-ippool","uid":"2c3a1d2e-0000-0000-0000-000000000001","creationTimestamp":"2026-11-21T00:00:00Z"},"spec":{"cidr":"10.244.0.0/16","ipipMode":"Never","vxlanMode":"Never","natOutgoing":true,"blockSize":26,"nodeSelector":"all()","allowedUses":["Workload","Tunnel"]}}`
	briefNode     = `{"kind":"Node","apiVersion":"projectcalico.org/v3","metadata":{"name":"node1","uid":"2c3a1d2e-0000-0000-0000-000000000002","creationTimestamp":"2026-11-21T00:00:00Z"},"spec":{}}`
	briefAffinity = `{"state":"confirmed","deleted":false}`
	briefHandle   = `{"block":{"10.244.166.128/26":1},"deleted":false}`
)

// briefBlock is the BRIEF block: ordinals 0 and 1 held by web-0 and web-1,
// ordinal 2 allocated and released.
var briefBlock = `{"cidr":"10.244.166.128/26","affinity":"host:node1","affinity_claim_time":"2026-11-21T18:29:54Z",` +
	`"allocations":[0,1` + strings.Repeat(",null", 62) + `],` +
	`"unallocated":[` + intList(3, 63) + `,2],` +
	`"attributes":[{"handle_id":"k8s-pod-network.0f1e2d3c4b5a","secondary":{"namespace":"default","node":"node1","pod":"web-0","timestamp":"2026-11-21 18:29:54.161129131 +0000 UTC"}},` +
	`{"handle_id":"k8s-pod-network.9a8b7c6d5e4f","secondary":{"namespace":"default","node":"node1","pod":"web-1","timestamp":"2026-11-21 18:29:54.193792229 +0000 UTC"}}],` +
	`"sequenceNumber":1795285794169824573,"sequenceNumberForAllocation":{"0":1795285794169824569,"1":1795285794169824570},"deleted":false}`

func intList(from, to int) string {
	parts := make([]string, 0, to-from+1)
	for i := from; i <= to; i++ {
		parts = append(parts, fmt.Sprint(i))
	}
	return strings.Join(parts, ",")
}
