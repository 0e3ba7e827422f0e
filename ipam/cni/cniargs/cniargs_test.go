package cniargs

import "testing"

func TestParseAndStripPodIdentity(t *testing.T) {
	tests := []struct {
		name, in, stripped, ns, pod string
		wantErr                     bool
	}{
		{name: "empty", in: "", stripped: ""},
		{name: "kubelet", in: "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=abc;K8S_POD_UID=u1",
			stripped: "IgnoreUnknown=1;K8S_POD_INFRA_CONTAINER_ID=abc;K8S_POD_UID=u1", ns: "default", pod: "web-0"},
		{name: "order and values kept", in: "B=2;K8S_POD_NAME=x;A=a=b", stripped: "B=2;A=a=b", pod: "x"},
		{name: "empty value", in: "K8S_POD_NAMESPACE=;X=", stripped: "X="},
		{name: "no equals", in: "A=1;B", wantErr: true},
		{name: "trailing separator", in: "A=1;", wantErr: true},
		{name: "empty key", in: "=1", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args, err := Parse(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Parse(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			if got := args.WithoutPodIdentity().String(); got != tt.stripped {
				t.Errorf("stripped = %q, want %q", got, tt.stripped)
			}
			if args.Get(PodNamespace) != tt.ns || args.Get(PodName) != tt.pod {
				t.Errorf("pod = %q/%q, want %q/%q", args.Get(PodNamespace), args.Get(PodName), tt.ns, tt.pod)
			}
			if got := args.String(); got != tt.in {
				t.Errorf("round trip = %q, want %q", got, tt.in)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "A=1", "K8S_POD_NAMESPACE=a;K8S_POD_NAME=b;X=y", "A=1;", "=", "a=b=c;d=e"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		args, err := Parse(s)
		if err != nil {
			return
		}
		if args.String() != s {
			t.Fatalf("round trip of %q gave %q", s, args.String())
		}
		stripped := args.WithoutPodIdentity()
		if stripped.Get(PodNamespace) != "" || stripped.Get(PodName) != "" {
			t.Fatalf("pod identity left in %q", stripped.String())
		}
		again, err := Parse(stripped.String())
		if err != nil && stripped.String() != "" {
			t.Fatalf("stripped %q does not parse: %v", stripped.String(), err)
		}
		if err == nil && again.String() != stripped.String() {
			t.Fatalf("stripped round trip %q != %q", again.String(), stripped.String())
		}
	})
}
