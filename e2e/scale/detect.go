package scale

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/safe-ipam/safe-ipam/e2e/bench"
	"github.com/safe-ipam/safe-ipam/e2e/harness/calicodata"
	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
	"github.com/safe-ipam/safe-ipam/e2e/harness/etcdtest"
	"github.com/safe-ipam/safe-ipam/e2e/harness/kubetest"
	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/calico/datastore"
	"github.com/safe-ipam/safe-ipam/ipam/detect"
)

// DetectOptions size one measurement of safe-ipam detect, the
// cluster-wide check one elected instance runs every DetectPeriod.
type DetectOptions struct {
	// Datastore is Calico's: datastore.Etcd (default) or
	// datastore.Kubernetes.
	Datastore string
	// Nodes x Pods are planted: Kubernetes Nodes, their running pods and
	// the pods' addresses in Calico's IPAM data.
	Nodes, Pods int
	// BlockSize is the pool's block size (Calico's default: 26).
	BlockSize int
	// Bin holds safe-ipam-admin and peakrss.
	Bin string
	Dir string
	Log io.Writer
}

// DetectResult is one round of safe-ipam detect and what it cost.
type DetectResult struct {
	Opts  DetectOptions
	About string
	// Pods are the running pods planted, PodBytes the size of one as the
	// API server returns it (JSON); Allocations are Calico's, in Blocks.
	Pods, PodBytes, Allocations, Blocks int
	// PodList is what the API server served the round's listing of every
	// pod; Events the Events it posted (none on a clean cluster); Calico
	// what Calico's datastore served its scan (etcd's messages and bytes,
	// or the API server's crd.projectcalico.org requests).
	PodList, Events, Calico Served
	// Seconds is the round's wall time (the binary's, from start to
	// exit), PeakRSSKiB its peak resident memory.
	Seconds    float64
	PeakRSSKiB int64
	// Exit is the binary's exit code (0: clean) and Output what it
	// printed.
	Exit   int
	Output string
}

// Round is what the round asked of the API server and Calico's
// datastore together.
func (r *DetectResult) Round() Served { return r.PodList.Add(r.Events).Add(r.Calico) }

// detectNamespace holds the planted pods.
const detectNamespace = "apps"

// planters is how many nodes are planted at once: enough to keep the
// API server's two cores busy.
const planters = 16

// MeasureDetect plants the cluster in a real kube-apiserver (and, on
// etcd, Calico's data in a real etcd), then runs one round of the admin
// binary's `detect` as a process under peakrss and reads what the
// servers served it.
func MeasureDetect(ctx context.Context, o DetectOptions) (*DetectResult, error) {
	if o.BlockSize == 0 {
		o.BlockSize = 26
	}
	if o.Datastore == "" {
		o.Datastore = datastore.Etcd
	}
	r := &detectRig{o: o, res: &DetectResult{Opts: o}}
	defer r.close() // what start started, also when it fails
	if err := r.start(ctx); err != nil {
		return nil, err
	}
	start := time.Now()
	if err := r.plant(ctx); err != nil {
		return nil, fmt.Errorf("planting %d nodes x %d pods: %w", o.Nodes, o.Pods, err)
	}
	fmt.Fprintf(o.Log, "scale: planted %d pods and their addresses (%s): %s\n", r.res.Pods, o.Datastore, time.Since(start).Round(time.Millisecond))
	if err := r.round(ctx); err != nil {
		return r.res, err
	}
	return r.res, nil
}

// detectRig is one measurement's servers and clients.
type detectRig struct {
	o   DetectOptions
	res *DetectResult
	srv *kubetest.Server
	// kube plants the Nodes and pods, dyn Calico's objects on the
	// Kubernetes datastore; etcd is Calico's on etcd, etcdServed its
	// gRPC service's own count.
	kube       kubernetes.Interface
	dyn        dynamic.Interface
	etcd       *etcdtest.Server
	etcdServed *grpcServed
	// blocks and allocations are Calico's, as planted.
	blocks, allocations atomic.Int64
}

func (r *detectRig) start(ctx context.Context) error {
	pool := netip.MustParsePrefix("10.0.0.0/8")
	if blocks := r.o.Nodes * r.blocksPerNode(); blocks > 1<<(r.o.BlockSize-pool.Bits()) {
		return fmt.Errorf("%d nodes x %d pods take %d blocks of /%d: more than %s holds", r.o.Nodes, r.o.Pods, blocks, r.o.BlockSize, pool)
	}
	if err := os.MkdirAll(r.o.Dir, 0o755); err != nil {
		return err
	}
	var err error
	// Without the server's own Lease, as make scale runs it; without its
	// watch cache, a copy of every object in its memory (some GiB at
	// 500,000 pods, beside etcd's): a LIST reads etcd, and answers the
	// same pages. etcd's store outgrows its default quota there.
	store := etcdtest.Options{Fast: true, QuotaBytes: 8 << 30}
	if r.srv, err = kubetest.NewWith(filepath.Join(r.o.Dir, "kube"), store, "--feature-gates=APIServerIdentity=false", "--watch-cache=false"); err != nil {
		return err
	}
	planter := r.srv.Config()
	planter.QPS, planter.Burst = 5000, 5000 // planting is not what is measured
	if r.dyn, err = dynamic.NewForConfig(planter); err != nil {
		return err
	}
	planter.ContentType = "application/vnd.kubernetes.protobuf"
	if r.kube, err = kubernetes.NewForConfig(planter); err != nil {
		return err
	}
	if _, err := r.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: detectNamespace}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("namespace %s: %w", detectNamespace, err)
	}
	switch r.o.Datastore {
	case datastore.Kubernetes:
		r.res.About = "a real kube-apiserver (the pods, and Calico's Kubernetes datastore); what it served: its apiserver_request_total and apiserver_response_sizes for pods, Events and crd.projectcalico.org"
		if err := calicosim.InstallKubeCRDs(ctx, r.srv.Config(), calicodata.Path(calicodata.CRDs)); err != nil {
			return err
		}
		return calicosim.SeedKubeIPPool(ctx, r.srv.Config(), "default-ipv4-ippool", pool.String(), r.o.BlockSize)
	case datastore.Etcd:
		r.res.About = "a real kube-apiserver (the pods; its apiserver_request_total and apiserver_response_sizes for pods and Events) and a real etcd (Calico's etcd datastore; the messages its gRPC service received and the bytes of those it sent, counted by a stats handler: etcd's own counters are the process's, shared with the API server's etcd)"
		r.etcdServed = &grpcServed{}
		if r.etcd, err = etcdtest.NewWith(filepath.Join(r.o.Dir, "calico-etcd"), etcdtest.Options{Fast: true, GRPC: []grpc.ServerOption{grpc.StatsHandler(r.etcdServed)}}); err != nil {
			return err
		}
		return calicosim.SeedIPPool(ctx, r.etcd.Client(), "default-ipv4-ippool", pool.String(), r.o.BlockSize)
	}
	return fmt.Errorf("datastore %q: want %s or %s", r.o.Datastore, datastore.Etcd, datastore.Kubernetes)
}

func (r *detectRig) close() {
	if r.etcd != nil {
		r.etcd.Close()
	}
	if r.srv != nil {
		r.srv.Close()
	}
}

// blocksPerNode are the blocks a node's pods fill.
func (r *detectRig) blocksPerNode() int {
	size := 1 << (32 - r.o.BlockSize)
	return (r.o.Pods + size - 1) / size
}

// plant creates every node with its pods and their addresses, planters
// nodes at once, and sizes one pod as the API server returns it.
func (r *detectRig) plant(ctx context.Context) error {
	var done atomic.Int64
	start := time.Now()
	err := concurrently(r.o.Nodes, planters, func(i int) error {
		if err := r.plantNode(ctx, i); err != nil {
			return err
		}
		if n := done.Add(1); n%max(int64(r.o.Nodes/10), 1) == 0 {
			fmt.Fprintf(r.o.Log, "scale: planted %d of %d nodes (%s)\n", n, r.o.Nodes, time.Since(start).Round(time.Second))
		}
		return nil
	})
	if err != nil {
		return err
	}
	r.res.Pods = r.o.Nodes * r.o.Pods
	r.res.Allocations, r.res.Blocks = int(r.allocations.Load()), int(r.blocks.Load())
	if r.res.Pods == 0 {
		return nil
	}
	one, err := r.kube.CoreV1().Pods(detectNamespace).Get(ctx, podName(0, 0), metav1.GetOptions{})
	if err != nil {
		return err
	}
	data, err := json.Marshal(one)
	r.res.PodBytes = len(data)
	return err
}

// plantNode creates node i's Node, its pods' addresses in Calico's IPAM
// data as calico-ipam assigns them, and its running pods.
func (r *detectRig) plantNode(ctx context.Context, i int) error {
	node := nodeName(i)
	if _, err := r.kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("Node %s: %w", node, err)
	}
	at := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	holders := make([]calicosim.Holder, r.o.Pods)
	for p := range holders {
		holders[p] = calicosim.Holder{Handle: Network + "." + sandboxID(i, p), Secondary: map[string]string{
			"node": node, "namespace": detectNamespace, "pod": podName(i, p), "timestamp": at.String()}}
	}
	size := 1 << (32 - r.o.BlockSize)
	first := netip.PrefixFrom(bench.AddOffset(netip.MustParseAddr("10.0.0.0"), i*r.blocksPerNode()*size), r.o.BlockSize)
	blocks, err := calicosim.Filled(node, first, holders, at)
	if err != nil {
		return err
	}
	r.blocks.Add(int64(len(blocks)))
	for _, b := range blocks {
		r.allocations.Add(int64(b.Size() - b.FreeCount()))
	}
	if r.etcd != nil {
		err = calicosim.SeedBlocks(ctx, r.etcd.Client(), blocks)
	} else {
		err = calicosim.SeedKubeBlocks(ctx, r.dyn, blocks)
	}
	if err != nil {
		return err
	}
	for p := range r.o.Pods {
		// Each block's free list is taken in order: pod p holds the
		// address at its place in the node's blocks.
		addr, err := blocks[p/size].IP(p % size)
		if err != nil {
			return err
		}
		if err := r.runPod(ctx, i, p, addr, metav1.NewTime(at)); err != nil {
			return err
		}
	}
	return nil
}

// runPod creates pod p of node i and reports it running at addr, as the
// kubelet does once its sandbox's network is up (the API server keeps no
// status given at creation).
func (r *detectRig) runPod(ctx context.Context, i, p int, addr netip.Addr, at metav1.Time) error {
	pods := r.kube.CoreV1().Pods(detectNamespace)
	want := podFor(i, p, addr, at)
	made, err := pods.Create(ctx, want, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("pod %s: %w", want.Name, err)
	}
	made.Status = want.Status
	if _, err := pods.UpdateStatus(ctx, made, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("the status of pod %s: %w", want.Name, err)
	}
	return nil
}

func podName(i, p int) string { return fmt.Sprintf("app-%05d-%04d", i, p) }

// hexID is an ID of what (a sandbox, a container, an object) of pod p on
// node i: 64 hex digits, as containerd's, fixed for a run's replays.
func hexID(what string, i, p int) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s/%d/%d", what, i, p))
	return hex.EncodeToString(sum[:])
}

// sandboxID is the container ID of pod p's sandbox on node i, which
// Calico's handle names.
func sandboxID(i, p int) string { return hexID("sandbox", i, p) }

// podFor is pod p of node i as a Deployment's pod is once running: bound
// to the node, owned by its ReplicaSet, one container, Calico's
// annotations as its CNI plugin writes them and status.podIPs as the
// kubelet reports them, both addr. Its size is a real pod's, which is
// what a listing's bytes are made of.
func podFor(i, p int, addr netip.Addr, at metav1.Time) *corev1.Pod {
	app, hash := fmt.Sprintf("app-%05d", i), "7d9f8c6b5"
	cidr := netip.PrefixFrom(addr, addr.BitLen()).String()
	hostIP := bench.AddOffset(netip.MustParseAddr("172.16.0.0"), i).String()
	uid := func(kind string, n int) k8stypes.UID {
		h := hexID(kind, i, n)
		return k8stypes.UID(h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32])
	}
	image := "registry.k8s.io/pause:3.10"
	ready := func(t corev1.PodConditionType) corev1.PodCondition {
		return corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: at}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: podName(i, p), Namespace: detectNamespace, UID: uid("pod", p),
			Labels: map[string]string{"app": app, "pod-template-hash": hash},
			Annotations: map[string]string{"cni.projectcalico.org/containerID": sandboxID(i, p),
				detect.AnnotationPodIP: cidr, detect.AnnotationPodIPs: cidr},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: app + "-" + hash, UID: uid("replicaset", 0),
				Controller: ptr(true), BlockOwnerDeletion: ptr(true)}}},
		Spec: corev1.PodSpec{NodeName: nodeName(i), Containers: []corev1.Container{{Name: "app", Image: image,
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, QOSClass: corev1.PodQOSBurstable, StartTime: &at,
			HostIP: hostIP, HostIPs: []corev1.HostIP{{IP: hostIP}}, PodIP: addr.String(), PodIPs: []corev1.PodIP{{IP: addr.String()}},
			Conditions: []corev1.PodCondition{ready("PodReadyToStartContainers"), ready(corev1.PodInitialized), ready(corev1.PodReady),
				ready(corev1.ContainersReady), ready(corev1.PodScheduled)},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Ready: true, Started: ptr(true), Image: image,
				ImageID:     "registry.k8s.io/pause@sha256:ee6521f290b2168b6e0935a181d4cff9be1ac3f505666ef0e3c98fae8199917a",
				ContainerID: "containerd://" + hexID("container", i, p),
				State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: at}}}}},
	}
}

func ptr[T any](v T) *T { return &v }

// round runs one round of safe-ipam detect, once, as the elected
// instance runs it each period, and reads what it cost.
func (r *detectRig) round(ctx context.Context) error {
	rssFile := filepath.Join(r.o.Dir, "detect.peakrss")
	args := []string{"-o", rssFile, filepath.Join(r.o.Bin, "safe-ipam-admin"), "detect", "--datastore", r.o.Datastore, "--kubeconfig", r.srv.Kubeconfig}
	if r.etcd != nil {
		args = append(args, "--etcd-endpoints", r.etcd.Endpoint())
	}
	before, err := r.served(ctx)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(r.o.Bin, "peakrss"), args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err = cmd.Run()
	r.res.Seconds = time.Since(start).Seconds()
	r.res.Output = out.String()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.res.Exit = exit.ExitCode()
	case err != nil:
		return fmt.Errorf("safe-ipam detect: %w", err)
	}
	if r.res.PeakRSSKiB, err = bench.ReadPeakRSS(rssFile); err != nil {
		return fmt.Errorf("safe-ipam detect's peak RSS (exit %d): %w\n%s", r.res.Exit, err, r.res.Output)
	}
	after, err := r.served(ctx)
	if err != nil {
		return err
	}
	r.res.PodList = after.pods.Sub(before.pods)
	r.res.Events = after.events.Sub(before.events)
	r.res.Calico = after.calico.Sub(before.calico)
	return nil
}

// detectServed is what the servers served so far, by what the check
// reads.
type detectServed struct{ pods, events, calico Served }

func (r *detectRig) served(ctx context.Context) (detectServed, error) {
	by, err := apiServed(ctx, r.srv)
	if err != nil {
		return detectServed{}, err
	}
	s := detectServed{pods: by[apiResource{resource: "pods"}], events: by[apiResource{resource: "events"}]}
	if r.etcdServed != nil {
		s.calico = r.etcdServed.served()
		return s, nil
	}
	for res, v := range by {
		if res.group == calico.KDDGroup {
			s.calico = s.calico.Add(v)
		}
	}
	return s, nil
}
