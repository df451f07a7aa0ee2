package validator

import (
	"testing"
	"time"
)

// TestWaitToSlotSharesInstants: a quiet partition's slow tick ends on a
// multiple of the tick since slotBase, whenever it was started, so the
// instance's quiet partitions wake together.
func TestWaitToSlotSharesInstants(t *testing.T) {
	const d = 500 * time.Millisecond
	for _, since := range []time.Duration{0, time.Nanosecond, 7 * time.Millisecond, 499 * time.Millisecond,
		d, 1234567 * time.Microsecond, 3*time.Hour + 1} {
		w := waitToSlot(since, d)
		if w <= 0 || w > d {
			t.Errorf("waitToSlot(%v, %v) = %v, want in (0, %v]", since, d, w, d)
		}
		if (since+w)%d != 0 {
			t.Errorf("waitToSlot(%v, %v) = %v ends %v past a slot", since, d, w, (since+w)%d)
		}
	}
	if w := alignedWait(d); w <= 0 || w > d {
		t.Errorf("alignedWait(%v) = %v, want in (0, %v]", d, w, d)
	}
}
