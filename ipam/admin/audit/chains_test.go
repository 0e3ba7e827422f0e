package audit

import "testing"

// first names a key's first item, says when it is the only one, and is
// safe on a key without items, or outside the chains.
func TestChainsFirst(t *testing.T) {
	c := newChains(3, 4)
	c.add(0, 7)
	c.add(1, 8)
	c.add(0, 9)
	for _, tc := range []struct {
		key  int
		item int32
		only bool
	}{{0, 7, false}, {1, 8, true}, {2, -1, false}, {5, -1, false}, {-1, -1, false}} {
		if item, only := c.first(tc.key); item != tc.item || only != tc.only {
			t.Errorf("first(%d) = %d, %v; want %d, %v", tc.key, item, only, tc.item, tc.only)
		}
	}
}
