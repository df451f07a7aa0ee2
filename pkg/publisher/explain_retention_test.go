package publisher

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/explain"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// TestExplainLastsAsLongAsTheWindow (docs/spec.md §6): a window whose
// state is retired (final, past the replay horizon) but still in the bucket
// explains as before its retirement, from the record retire.lua keeps; once
// pruned beyond --window-retention it is unknown, naming it, and its
// record is gone from Redis.
func TestExplainLastsAsLongAsTheWindow(t *testing.T) {
	r := newHistoryRig(t, 4*time.Hour)
	// The rig's traffic, with a correction of T05 in partition 0 (its
	// watermark past 06:00, within grace) and a duplicate of it.
	r.submit(0, "2026-12-01T22:10:00Z", "2026-12-01T22:20:00Z", "2026-12-01T23:05:00Z",
		"2026-12-02T00:01:00Z", "2026-12-02T01:30:00Z", "2026-12-02T02:30:00Z", "2026-12-02T05:59:00Z")
	r.submit(0, "2026-12-02T06:05:00Z", "2026-12-02T05:30:00Z", "2026-12-02T05:30:00Z")
	r.submit(1, "2026-12-01T23:15:00Z", "2026-12-02T00:40:00Z", "2026-12-02T00:50:00Z",
		"2026-12-02T03:00:00Z", "2026-12-02T04:00:00Z")
	r.submit(0, "2026-12-02T08:00:00Z")
	r.submit(1, "2026-12-02T08:00:00Z")
	// A copy of the correction's id with other content, rejected: its row
	// names the window of the counted copy, as the validator writes it.
	const conflict = "2026-12-02T05:30:00Z/a"
	r.rejectConflict(conflict, "2026-12-02T05")
	r.pass(r.svc)
	d := explain.Deployment{JS: r.js, Store: r.store, Names: wire.For(""), Attempts: 1}
	ids := []string{"2026-12-01T22", "2026-12-02T00", "2026-12-02T05"}
	before := map[string]*explain.Explanation{}
	for _, id := range ids {
		e, err := d.Explain(r.ctx, id)
		if err != nil {
			t.Fatalf("%s before retirement: %v", id, err)
		}
		before[id] = e
	}
	if e := before["2026-12-02T05"]; len(e.Corrections) != 1 || e.Duplicates != 1 || e.OnTime != 1 ||
		!reflect.DeepEqual(e.Conflicts, []string{conflict}) {
		t.Fatalf("the fixture has no correction, duplicate or conflict in T05: %+v", e)
	}

	// Retired up to 06:00 in both partitions: T22 .. T05 keep no partial
	// and no ledger, and stay in the bucket until the next pass (of them,
	// only T05 is inside the 4h retention behind the head, T08).
	r.retire(time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC))
	rdb := r.rdb
	keys, err := rdb.Keys(r.ctx, "rf:1:*2026-12-02T05*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if !strings.Contains(k, ":x:") {
			t.Errorf("retirement left %s: only the explain record stays", k)
		}
	}
	e, err := d.Explain(r.ctx, "2026-12-02T05")
	if err != nil {
		t.Fatalf("retired, still retained: %v", err)
	}
	want := *before["2026-12-02T05"]
	if !reflect.DeepEqual(*e, want) {
		t.Fatalf("retired, still retained:\n got %+v\nwant %+v", e, want)
	}
	// A row written before rows named their window can only be checked
	// against a ledger, and T05's is retired: explain says so.
	r.rejectConflict("2026-12-02T05:59:00Z/a", "")
	if e, err = d.Explain(r.ctx, "2026-12-02T05"); err != nil {
		t.Fatal(err)
	}
	want.ConflictsUnknown = true
	if !reflect.DeepEqual(*e, want) {
		t.Fatalf("retired, with a row naming no window:\n got %+v\nwant %+v", e, want)
	}

	// The pass prunes what is beyond the retention (T22 .. T04, not T05):
	// each pruned window is unknown and its record gone.
	r.pass(r.svc)
	if _, ok := r.window("2026-12-02T05"); !ok {
		t.Fatal("T05 pruned inside the retention")
	}
	if _, err := d.Explain(r.ctx, "2026-12-02T05"); err != nil {
		t.Fatalf("T05 after the pass: %v", err)
	}
	for _, id := range ids[:2] {
		if _, ok := r.window(id); ok {
			t.Fatalf("%s not pruned", id)
		}
		_, err := d.Explain(r.ctx, id)
		if !errors.Is(err, explain.ErrUnknownWindow) || !strings.Contains(err.Error(), id) {
			t.Fatalf("%s pruned: %v, want unknown naming it", id, err)
		}
		left, err := rdb.Keys(r.ctx, "rf:1:*"+id+"*").Result()
		if err != nil || len(left) != 0 {
			t.Fatalf("%s pruned, Redis still holds %v (%v)", id, left, err)
		}
	}
}

// rejectConflict stores a REJECTED conflicting_duplicate row of id, naming
// window win of the counted copy ("" for a row from before HdrWindow).
func (r *historyRig) rejectConflict(id, win string) {
	r.t.Helper()
	names := wire.For("")
	msg := stream.NewMsg(names.Subject(wire.Rejected, 0), "rej-"+id, []byte(`{}`))
	msg.Header.Set(wire.HdrReason, string(contract.ReasonConflictingDuplicate))
	msg.Header.Set(wire.HdrEventID, id)
	if win != "" {
		msg.Header.Set(wire.HdrWindow, win)
	}
	if _, err := r.js.PublishMsg(r.ctx, msg); err != nil {
		r.t.Fatal(err)
	}
}
