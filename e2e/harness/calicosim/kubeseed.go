package calicosim

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
)

// SeedKubeIPPool creates a crd.projectcalico.org/v1 IPPool as the run in
// kdd-samples.json had it: no encapsulation, all nodes.
func SeedKubeIPPool(ctx context.Context, cfg *rest.Config, name, cidr string, blockSize int) error {
	prefix, err := netip.ParsePrefix(cidr)
	if err != nil {
		return fmt.Errorf("seeding pool %s: %w", name, err)
	}
	spec := calico.IPPoolSpec{CIDR: prefix.Masked().String(), BlockSize: blockSize, IPIPMode: "Never", VXLANMode: "Never", NodeSelector: "all()"}
	o, err := newKubeObject(kindPool, name, nil, spec)
	if err != nil {
		return err
	}
	o.Metadata.Annotations = nil // Calico's annotation is for IPAM objects
	return seedKube(ctx, cfg, kindPool, o, false)
}

// SeedKubeNode creates the v1 Node calico-ipam looks up; one that exists
// already is fine.
func SeedKubeNode(ctx context.Context, cfg *rest.Config, name string) error {
	o := &kubeObject{APIVersion: "v1", Kind: "Node", Metadata: metav1.ObjectMeta{Name: name}}
	return seedKube(ctx, cfg, kindNode, o, true)
}

func seedKube(ctx context.Context, cfg *rest.Config, k kind, o *kubeObject, existingOK bool) error {
	dyn, err := newDynamic(cfg)
	if err != nil {
		return err
	}
	u, err := o.unstructured()
	if err != nil {
		return err
	}
	_, err = dyn.Resource(k.gvr).Create(ctx, u, metav1.CreateOptions{})
	if err != nil && !(existingOK && apierrors.IsAlreadyExists(err)) {
		return fmt.Errorf("seeding %s %s: %w", k.name, o.Metadata.Name, err)
	}
	return nil
}

// SeedKubeLegacyHandle is SeedLegacyHandle on the Kubernetes datastore.
func SeedKubeLegacyHandle(ctx context.Context, cfg *rest.Config, node, handle string) (netip.Addr, error) {
	dyn, err := newDynamic(cfg)
	if err != nil {
		return netip.Addr{}, err
	}
	return seedLegacy(ctx, &Allocator{Kube: dyn, Node: node}, handle)
}

// InstallKubeCRDs creates the CustomResourceDefinitions of a YAML file
// (such as calicodata.CRDs) and waits until the apiserver
// serves them. CRDs that exist already are left as they are.
func InstallKubeCRDs(ctx context.Context, cfg *rest.Config, crdsYAMLPath string) error {
	data, err := os.ReadFile(crdsYAMLPath)
	if err != nil {
		return fmt.Errorf("installing CRDs: %w", err)
	}
	dyn, err := newDynamic(cfg)
	if err != nil {
		return err
	}
	for _, doc := range bytes.Split(data, []byte("\n---")) {
		var obj map[string]any
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			return fmt.Errorf("installing CRDs from %s: %w", crdsYAMLPath, err)
		}
		if obj["kind"] != "CustomResourceDefinition" {
			continue
		}
		if err := installCRD(ctx, dyn, &unstructured.Unstructured{Object: obj}); err != nil {
			return err
		}
	}
	return nil
}

func installCRD(ctx context.Context, dyn dynamic.Interface, crd *unstructured.Unstructured) error {
	r := dyn.Resource(gvrCRD)
	if _, err := r.Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating CRD %s: %w", crd.GetName(), err)
	}
	for {
		got, err := r.Get(ctx, crd.GetName(), metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading CRD %s: %w", crd.GetName(), err)
		}
		if established(got) {
			return nil
		}
		if err := pause(ctx, 50*time.Millisecond); err != nil {
			return fmt.Errorf("CRD %s not established: %w", crd.GetName(), err)
		}
	}
}

func established(crd *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}

// MoveKubeAffinity moves the affinity of the block cidr from node from to
// node to on the Kubernetes datastore, as when a block's affinity is
// released and another node claims it while addresses in it are still
// allocated: from's BlockAffinity goes, to's is made, and the block names
// to. Calico's own allocations in the block stay as they are.
func MoveKubeAffinity(ctx context.Context, cfg *rest.Config, cidr netip.Prefix, from, to string) error {
	dyn, err := newDynamic(cfg)
	if err != nil {
		return err
	}
	c := kubeClient{dyn: dyn}
	if err := dyn.Resource(kindAffinity.gvr).Delete(ctx, calico.AffinityName(from, cidr), metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("moving the affinity of %s: %w", cidr, err)
	}
	aff, err := newKubeObject(kindAffinity, calico.AffinityName(to, cidr), calico.AffinityLabels(to, cidr),
		calico.NewBlockAffinitySpec(to, cidr, calico.ConfirmedAffinity()))
	if err != nil {
		return err
	}
	if _, err := c.create(ctx, kindAffinity, aff); err != nil {
		return err
	}
	block, err := c.get(ctx, kindBlock, calico.BlockName(cidr))
	if err != nil {
		return err
	}
	var spec map[string]any
	if err := block.decodeSpec(&spec); err != nil {
		return err
	}
	spec["affinity"] = "host:" + to
	if block, err = block.withSpec(spec); err != nil {
		return err
	}
	_, err = c.update(ctx, kindBlock, block)
	return err
}
