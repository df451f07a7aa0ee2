package lease

import (
	"maps"
	"testing"
	"time"
)

// ceilDiv is ceil(a/b).
func ceilDiv(a, b int) int { return (a + b - 1) / b }

// TestAssignFairShare: every partition has one target owner and none gets
// more than ceil(P/n), for n = 1..5 members, with and without holders.
func TestAssignFairShare(t *testing.T) {
	all := []string{"a", "b", "c", "d", "e"}
	for _, P := range []int{1, 3, 8, 12} {
		for n := 1; n <= len(all); n++ {
			members := all[:n]
			for name, holders := range map[string]map[int]string{
				"none": nil,
				"a holds all": func() map[int]string {
					h := map[int]string{}
					for p := range P {
						h[p] = "a"
					}
					return h
				}(),
				"gone holder": {0: "z", 1: "z"},
			} {
				got := Assign(P, members, holders)
				if len(got) != P {
					t.Fatalf("P=%d n=%d %s: %d partitions assigned", P, n, name, len(got))
				}
				for _, m := range members {
					if k := len(Of(got, m)); k > ceilDiv(P, n) || k < P/n {
						t.Errorf("P=%d n=%d %s: %s gets %d partitions, want %d..%d", P, n, name, m, k, P/n, ceilDiv(P, n))
					}
				}
			}
		}
	}
}

// TestAssignSticky: a settled group moves nothing; a joiner takes only
// what the others give up; holders that left are ignored.
func TestAssignSticky(t *testing.T) {
	settled := map[int]string{0: "b", 1: "a", 2: "b", 3: "a", 4: "a", 5: "b", 6: "b", 7: "a"}
	if got := Assign(8, []string{"a", "b"}, settled); !maps.Equal(got, settled) {
		t.Errorf("settled group moved: %v, want %v", got, settled)
	}
	got := Assign(8, []string{"b", "a", "c"}, settled)
	moved := 0
	for p, m := range got {
		if m != settled[p] {
			moved++
			if m != "c" {
				t.Errorf("partition %d moved to %s, not to the joiner", p, m)
			}
		}
	}
	if moved != 2 {
		t.Errorf("join of a third member moved %d partitions (%v), want 2", moved, got)
	}
	// The same arguments in another order give the same target.
	if again := Assign(8, []string{"c", "b", "a", "a"}, settled); !maps.Equal(got, again) {
		t.Errorf("Assign depends on member order: %v vs %v", got, again)
	}
	if Assign(8, nil, settled) != nil {
		t.Error("Assign without members is not nil")
	}
}

func TestKeys(t *testing.T) {
	for _, k := range []string{MemberKey("windower", "host-1a2b"), LeaseKey("validator", 7)} {
		kind, what, rest, ok := parseKey(k)
		if !ok || kind == "" || what == "" || rest == "" {
			t.Errorf("parseKey(%q) = %q %q %q %v", k, kind, what, rest, ok)
		}
	}
	if a, b := NewID(), NewID(); a == b {
		t.Errorf("NewID twice: %q", a)
	}
	for in, want := range map[string]string{"0s": "1s", "1s": "1s", "1500ms": "2s", "10s": "10s"} {
		d, _ := time.ParseDuration(in)
		if got := ttlOf(d).String(); got != want {
			t.Errorf("ttlOf(%s) = %s, want %s", in, got, want)
		}
	}
}
