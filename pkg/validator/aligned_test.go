package validator

import (
	"testing"
	"time"
)

// TestAlignedWaitSharesInstants: a quiet partition's slow tick ends on a
// multiple of the tick since slotBase, whenever it was started, so the
// instance's quiet partitions wake together.
func TestAlignedWaitSharesInstants(t *testing.T) {
	const d = 500 * time.Millisecond
	for _, gap := range []time.Duration{0, 7 * time.Millisecond, 130 * time.Millisecond, 480 * time.Millisecond} {
		time.Sleep(gap)
		since := time.Since(slotBase)
		w := alignedWait(d)
		if w <= 0 || w > d {
			t.Fatalf("alignedWait(%v) = %v, want in (0, %v]", d, w, d)
		}
		// The end of the wait is a multiple of d: within the moment
		// between the two clock reads.
		if off := (since + w) % d; off > 5*time.Millisecond && d-off > 5*time.Millisecond {
			t.Errorf("after %v the wait %v ends %v past a slot", gap, w, off)
		}
	}
}
