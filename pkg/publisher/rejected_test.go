package publisher

import (
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/receiptflow/receiptflow/pkg/wire"
)

// reject stores one REJECTED message per reason, as the validator writes
// them (reason and RAW sequence in headers).
func (r *historyRig) reject(reasons ...string) {
	r.t.Helper()
	for _, reason := range reasons {
		r.seq[0]++
		m := nats.NewMsg(wire.For("").Subject(wire.Rejected, 0))
		m.Header.Set(wire.HdrReason, reason)
		m.Header.Set(wire.HdrRawSeq, strconv.FormatUint(r.seq[0], 10))
		m.Data = []byte("{not json")
		if _, err := r.js.PublishMsg(r.ctx, m); err != nil {
			r.t.Fatal(err)
		}
	}
}

// tally counts REJECTED with s and checks the result against want, both
// as returned and as stored under meta.rejected.
func (r *historyRig) tally(s *Service, want map[string]uint64, through, expired uint64) {
	r.t.Helper()
	got, err := s.countRejected(r.ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	var total uint64
	for _, n := range want {
		total += n
	}
	w := wire.Rejections{ByReason: want, Total: total, Through: through, Expired: expired}
	if !reflect.DeepEqual(*got, w) {
		r.t.Fatalf("tally %+v, want %+v", *got, w)
	}
	e, err := r.kv.Get(r.ctx, wire.RejectedKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) && total == 0 && through == 0 {
		return // nothing counted, nothing written
	}
	if err != nil {
		r.t.Fatal(err)
	}
	var stored wire.Rejections
	if err := json.Unmarshal(e.Value(), &stored); err != nil {
		r.t.Fatal(err)
	}
	if !reflect.DeepEqual(stored, w) {
		r.t.Fatalf("stored %s %+v, want %+v", wire.RejectedKey, stored, w)
	}
}

// TestRejectedTallyAcrossRestarts (issue 26, papercut 9): the rejected-by-
// reason tally counts every REJECTED message once: counting again changes
// nothing; a restarted publisher (nothing in memory) goes on from the
// stored tally, neither from zero nor from the stream's start; two
// publishers counting the same messages count them once (the one behind
// loses its compare-and-set and goes on from the other's tally); a tick's
// batch is bounded and the next tick goes on; and messages that left the
// stream before they were counted are counted as expired.
func TestRejectedTallyAcrossRestarts(t *testing.T) {
	r := newHistoryRig(t, 3*time.Hour)
	a := r.svc
	r.tally(a, map[string]uint64{}, 0, 0) // nothing rejected yet
	r.reject("malformed_json", "unknown_type", "malformed_json")
	r.tally(a, map[string]uint64{"malformed_json": 2, "unknown_type": 1}, 3, 0)
	r.tally(a, map[string]uint64{"malformed_json": 2, "unknown_type": 1}, 3, 0) // twice, same tally

	// A restart: a new instance with nothing in memory.
	r.reject("future_timestamp")
	b := r.publisher(3 * time.Hour)
	r.tally(b, map[string]uint64{"malformed_json": 2, "unknown_type": 1, "future_timestamp": 1}, 4, 0)

	// a still holds the tally through 3: its write loses, and it goes on
	// from b's.
	reg := prometheus.NewRegistry()
	a.m = newMetrics(reg)
	r.reject("conflicting_duplicate", "malformed_json")
	r.tally(a, map[string]uint64{"malformed_json": 3, "unknown_type": 1, "future_timestamp": 1, "conflicting_duplicate": 1}, 6, 0)
	if n := counter(t, reg, "receiptflow_publisher_kv_conflicts_total"); n != 1 {
		t.Fatalf("%v compare-and-set conflicts, want the one of the publisher behind", n)
	}
	r.tally(b, map[string]uint64{"malformed_json": 3, "unknown_type": 1, "future_timestamp": 1, "conflicting_duplicate": 1}, 6, 0)

	// Messages purged from REJECTED before anyone counted them.
	r.reject("too_large", "too_large", "bad_timestamp")
	st, err := r.js.Stream(r.ctx, wire.Rejected)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Purge(r.ctx, jetstream.WithPurgeSequence(8)); err != nil { // 7 gone
		t.Fatal(err)
	}
	r.tally(b, map[string]uint64{"malformed_json": 3, "unknown_type": 1, "future_timestamp": 1, "conflicting_duplicate": 1,
		"too_large": 1, "bad_timestamp": 1}, 9, 1)

	// The newest messages deleted one by one: counted up to the stream's
	// last sequence all the same.
	r.reject("unknown_type", "unknown_type", "unknown_type")
	for _, seq := range []uint64{11, 12} {
		if err := st.DeleteMsg(r.ctx, seq); err != nil {
			t.Fatal(err)
		}
	}
	r.tally(b, map[string]uint64{"malformed_json": 3, "unknown_type": 2, "future_timestamp": 1, "conflicting_duplicate": 1,
		"too_large": 1, "bad_timestamp": 1}, 12, 1)

	// A tick counts at most rejectedBatch messages; the next goes on.
	defer func(n uint64) { rejectedBatch = n }(rejectedBatch)
	rejectedBatch = 2
	r.reject("missing_field", "missing_field", "missing_field")
	r.tally(b, map[string]uint64{"malformed_json": 3, "unknown_type": 2, "future_timestamp": 1, "conflicting_duplicate": 1,
		"too_large": 1, "bad_timestamp": 1, "missing_field": 2}, 14, 1)
	r.tally(b, map[string]uint64{"malformed_json": 3, "unknown_type": 2, "future_timestamp": 1, "conflicting_duplicate": 1,
		"too_large": 1, "bad_timestamp": 1, "missing_field": 3}, 15, 1)
}

// TestRejectedTallyInTheHealthReport: the tick puts the tally in
// meta.health, where the dashboard's health panel reads it.
func TestRejectedTallyInTheHealthReport(t *testing.T) {
	r := newHistoryRig(t, 3*time.Hour)
	r.reject("malformed_json", "missing_field")
	if err := r.svc.tick(r.ctx); err != nil {
		t.Fatal(err)
	}
	e, err := r.kv.Get(r.ctx, wire.HealthKey)
	if err != nil {
		t.Fatal(err)
	}
	var h wire.Health
	if err := json.Unmarshal(e.Value(), &h); err != nil {
		t.Fatal(err)
	}
	if h.Rejected == nil || h.Rejected.Total != 2 || h.Rejected.ByReason["missing_field"] != 1 {
		t.Fatalf("meta.health rejected: %+v", h.Rejected)
	}
}
