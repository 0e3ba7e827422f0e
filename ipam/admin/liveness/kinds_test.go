package liveness

import "testing"

// Messages and usage lines list the sources from the one table.
func TestSay(t *testing.T) {
	containers := func(k Kind) bool { return !k.PodsOnly }
	only := func(flag string) func(Kind) bool { return func(k Kind) bool { return k.Flag == flag } }
	tests := []struct {
		name string
		got  string
		want string
	}{
		{"a sentence", Say(containers, Kind.FlagName, "or"), "--cri-endpoint, --cni-cache or --live"},
		{"every kind", Say(Any, Kind.FlagName, "and"), "--cri-endpoint, --cni-cache, --live and --kubeconfig"},
		{"a usage line", Say(containers, Kind.FlagArg, "|"), "--cri-endpoint URL | --cni-cache DIR | --live FILE"},
		{"one kind", Say(only("live"), Kind.FlagName, "or"), "--live"},
		{"names", Say(only("kubeconfig"), Kind.ShowName, "or"), "the pods API"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, tt.got, tt.want)
		}
	}
}
