package datastore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// A scan reads each list page as a stream, one object at a time, and
// decodes its spec straight into Calico's types: a page of 2,000
// IPAMBlocks is some 30 MB of JSON, which the dynamic client's generic
// maps would hold several times over (detect at 500,000 pods, issue 47).

// object is what a scan reads of one listed object; its spec is decoded
// by what visits it, so that one that does not decode is reported, not
// fatal.
type object struct {
	Metadata struct {
		Name            string `json:"name"`
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
	Spec json.RawMessage `json:"spec"` // absent: as null, a zero spec
}

// listMeta is a list page's metadata.
type listMeta struct {
	ResourceVersion string `json:"resourceVersion"`
	Continue        string `json:"continue"`
}

// listClient reads list pages as JSON whatever the cluster prefers
// (CBOR, protobuf), through the rest config's rate limit.
func listClient(cfg *rest.Config) (rest.Interface, error) {
	c := dynamic.ConfigFor(cfg) // its serializer reads the API server's Status errors
	c.ContentType, c.AcceptContentTypes = "application/json", "application/json"
	c.GroupVersion, c.APIPath = nil, "/"
	return rest.UnversionedRESTClientFor(c)
}

// page reads one page of gvr's list at opts and hands each object to
// each as it is decoded.
func (k *KubeStore) page(ctx context.Context, gvr schema.GroupVersionResource, opts metav1.ListOptions, each func(*object)) (listMeta, error) {
	body, err := k.lists.Get().AbsPath(apiPath(gvr)).VersionedParams(&opts, metav1.ParameterCodec).Stream(ctx)
	if err != nil {
		return listMeta{}, k.explain("listing", gvr, err)
	}
	defer body.Close()
	meta, err := decodeList(body, each)
	if err != nil {
		return listMeta{}, fmt.Errorf("Kubernetes API %s: listing %s.%s: the answer %s (not a complete list): %w", k.Host, gvr.Resource, gvr.Group, cutOrBad(err), err)
	}
	return meta, nil
}

// errNotList: the answer is JSON, but not a list's.
var errNotList = errors.New("not a list")

// cutOrBad tells an answer that is not a list (the server's, or what
// stands in its way) from one cut off on its way (a timeout, a closed
// connection), which an operator mends elsewhere.
func cutOrBad(err error) string {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	if errors.As(err, &syntax) || errors.As(err, &typ) || errors.Is(err, errNotList) {
		return "does not decode"
	}
	return "was not read whole (a timeout, a closed connection)"
}

// apiPath is gvr's collection: /api/v1/nodes, /apis/GROUP/VERSION/PLURAL.
func apiPath(gvr schema.GroupVersionResource) string {
	if gvr.Group == "" {
		return "/api/" + gvr.Version + "/" + gvr.Resource
	}
	return "/apis/" + gvr.Group + "/" + gvr.Version + "/" + gvr.Resource
}

// decodeList reads a list's JSON from r: its items, each handed to each
// as soon as it is read, and its metadata (which may come after them).
func decodeList(r io.Reader, each func(*object)) (listMeta, error) {
	dec := json.NewDecoder(r)
	var meta listMeta
	if err := delim(dec, '{'); err != nil {
		return meta, err
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return meta, err
		}
		switch key {
		case "metadata":
			err = dec.Decode(&meta)
		case "items":
			err = decodeItems(dec, each)
		default:
			var skip json.RawMessage
			err = dec.Decode(&skip)
		}
		if err != nil {
			return meta, fmt.Errorf("%v: %w", key, err)
		}
	}
	if err := delim(dec, '}'); err != nil {
		return meta, err
	}
	// Read to its end: nothing may follow the list.
	if tok, err := dec.Token(); err != io.EOF {
		return meta, fmt.Errorf("after the list: %v %w (%v)", tok, errNotList, err)
	}
	return meta, nil
}

func decodeItems(dec *json.Decoder, each func(*object)) error {
	tok, err := dec.Token()
	if err != nil || tok == nil { // null: no items
		return err
	}
	if tok != json.Delim('[') {
		return fmt.Errorf("%w: want an array, got %v", errNotList, tok)
	}
	for dec.More() {
		var o object
		if err := dec.Decode(&o); err != nil {
			return err
		}
		each(&o)
	}
	return delim(dec, ']')
}

func delim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok != want {
		return fmt.Errorf("%w: want %v, got %v", errNotList, want, tok)
	}
	return nil
}
