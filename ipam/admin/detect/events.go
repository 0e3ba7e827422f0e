package detect

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/safe-ipam/safe-ipam/ipam/detect"
)

// Component is the source the check's Events name.
const Component = "safe-ipam-detect"

// Reasons are the Events' reasons, by kind.
var Reasons = map[detect.Kind]string{
	detect.SharedAddress:      "SharedPodAddress",
	detect.AnnotationMismatch: "CalicoAnnotationMismatch",
	detect.EarlyRelease:       "PodAddressReleased",
	detect.GoneOwner:          "AddressHeldForGonePod",
}

// Event is one Event the check posts: on a pod involved, or on its Node.
type Event struct {
	Object  corev1.ObjectReference
	Reason  string
	Message string
	// Address is the finding's: with the object and the reason, what
	// makes one Event, whose message (the evidence, how long) may change.
	Address string
}

// EventsPerKind is how many findings of one kind a round posts Events
// for: a mass of findings (a datastore restored from an old backup) is a
// log line each and its count in the metrics, not thousands of writes to
// the API server every period.
const EventsPerKind = 50

// EventsFor are a report's Events: one on each pod a finding involves
// that the API server holds (a gone owner has none), and one on each
// node named, with the finding's evidence as the message; for the first
// EventsPerKind findings of each kind.
func EventsFor(r detect.Report, pods []detect.Pod) []Event {
	byKey := make(map[string]*detect.Pod, len(pods))
	for i := range pods {
		byKey[pods[i].Key()] = &pods[i]
	}
	var out []Event
	posted := map[detect.Kind]int{}
	for _, f := range r.Findings {
		if posted[f.Kind]++; posted[f.Kind] > EventsPerKind {
			continue
		}
		reason := Reasons[f.Kind]
		msg := fmt.Sprintf("%s %s: %s", f.Kind, f.Address, f.Why)
		nodes := map[string]bool{}
		for i, key := range f.Pods {
			if p, ok := byKey[key]; ok {
				out = append(out, Event{Object: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: p.Namespace, Name: p.Name, UID: k8stypes.UID(p.UID)},
					Reason: reason, Message: msg, Address: f.Address.String()})
			}
			if i < len(f.Nodes) && f.Nodes[i] != "" && !nodes[f.Nodes[i]] {
				nodes[f.Nodes[i]] = true
				// The node's name as its UID, as the kubelet's Events carry
				// it: what kubectl describe node looks for.
				out = append(out, Event{Object: corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: f.Nodes[i], UID: k8stypes.UID(f.Nodes[i])},
					Reason: reason, Message: msg, Address: f.Address.String()})
			}
		}
	}
	return out
}

// Post posts each Event, or, when the same Event (object, reason,
// address) was posted before, counts it again with its latest message: a finding that stands is
// one Event whose count grows each period, as the kubelet's are. Events
// of a Node live in the default namespace, as the kubelet posts them.
func Post(ctx context.Context, client kubernetes.Interface, events []Event, now time.Time) error {
	var errs []error
	for _, e := range events {
		if err := post(ctx, client, e, now); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func post(ctx context.Context, client kubernetes.Interface, e Event, now time.Time) error {
	ns := e.Object.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	// The UID too: a pod recreated under its name is another object,
	// whose Events kubectl describe finds by its UID.
	sum := sha256.Sum256([]byte(e.Object.Kind + "/" + e.Object.Namespace + "/" + e.Object.Name + "/" + string(e.Object.UID) + "/" + e.Reason + "/" + e.Address))
	// A name is at most 253 characters; the hash keeps it one object's.
	name := e.Object.Name[:min(len(e.Object.Name), 253-17)] + "." + hex.EncodeToString(sum[:8])
	ts := metav1.NewTime(now)
	events := client.CoreV1().Events(ns)
	// Read first: a finding that stands is an Event that exists, and
	// counts again in two requests, not three.
	return wrap(e, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := events.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, InvolvedObject: e.Object, Reason: e.Reason, Message: e.Message,
				Type: corev1.EventTypeWarning, Source: corev1.EventSource{Component: Component}, FirstTimestamp: ts, LastTimestamp: ts, Count: 1,
				ReportingController: Component}
			_, err = events.Create(ctx, ev, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(corev1.Resource("events"), name, err) // made meanwhile: count it
			}
			return err
		}
		if err != nil {
			return err
		}
		cur.Count++
		cur.LastTimestamp, cur.Message = ts, e.Message
		_, err = events.Update(ctx, cur, metav1.UpdateOptions{}) // at its resourceVersion
		return err
	}))
}

func wrap(e Event, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("posting the Event %s on %s %s/%s: %w", e.Reason, e.Object.Kind, e.Object.Namespace, e.Object.Name, err)
}
