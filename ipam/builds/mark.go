package builds

// Mark is the build mark: it is in every binary that refers to it
// (AdminBinary, through cninode.IsSafeIPAM, and EtcdBinary, for releases that
// knew no plugin/safe-ipam-etcd), and tells safe-ipam from Calico's
// binary when both are named calico-ipam, whatever their versions. Test
// doubles carry it too.
const Mark = "safe-ipam:binary-mark:6c1f0a2e-94d3-4b8e-a5f7-0e3d2c9b8a41"

// MainPackages are what Go's build info names as the main package of the
// CNI binary's builds: plugin/safe-ipam and plugin/safe-ipam-etcd, and
// plugin in releases that built both programs from one package (a node
// being upgraded still has that one). The lean build does not refer to
// Mark, so its build info, not Mark, tells it apart.
var MainPackages = []string{"github.com/safe-ipam/safe-ipam/plugin/" + CNIBinary, "github.com/safe-ipam/safe-ipam/plugin/" + EtcdBinary,
	"github.com/safe-ipam/safe-ipam/plugin"}
