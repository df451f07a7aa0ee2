package validator

import (
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// timed is a v2 record of id with occurred_at and, unless empty,
// ingested_at.
func timed(id, occurred, ingested string) []byte {
	rec := `{"schema_version":2,"event_id":"` + id + `","receipt_id":"r1","type":"submitted","occurred_at":"` + occurred + `",`
	if ingested != "" {
		rec += `"ingested_at":"` + ingested + `",`
	}
	return []byte(rec + `"partition_key":"store-a","producer_version":"p"}`)
}

// TestReceivedTimeIsTheBrokers: the validator bounds a record's times by
// the RAW message's JetStream timestamp (docs/spec.md §2), not by the
// producer's ingested_at and not by its own clock (the rig's clock is
// fixed at 2026-12-02T12:00Z). A year-9999 event is bad_timestamp, a
// year-2100 one with a matching forged ingested_at future_timestamp, an
// ingested_at of 1970 bad_timestamp; an event of a minute ago without
// ingested_at is valid, however far behind the validator's clock is.
func TestReceivedTimeIsTheBrokers(t *testing.T) {
	r := newRig(t, 0)
	recent := time.Now().UTC().Add(-time.Minute).Format(time.RFC3339Nano)
	recs := []struct {
		rec    []byte
		reason contract.Reason // "" valid
	}{
		{timed("t-9999", "9999-12-31T23:59:59.999999999Z", "9999-12-31T23:59:59.999999999Z"), contract.ReasonBadTimestamp},
		{timed("t-2100", "2100-01-01T00:00:00Z", "2100-01-01T00:00:00Z"), contract.ReasonFutureTimestamp},
		{timed("t-forged", "2026-12-02T10:15:00Z", "2100-01-01T00:00:00Z"), contract.ReasonFutureTimestamp},
		{timed("t-1970", "2026-12-02T10:15:00Z", "1970-01-01T00:00:00Z"), contract.ReasonBadTimestamp},
		{timed("t-recent", recent, ""), ""},
	}
	for _, tc := range recs {
		r.publish(tc.rec)
	}
	if err := r.s.handle(r.ctx, 0, r.fetch(len(recs))); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, m := range r.read(wire.Rejected) {
		got[m.Headers().Get(wire.HdrEventID)] = m.Headers().Get(wire.HdrReason) + ": " + m.Headers().Get(wire.HdrDetail)
	}
	valid := map[string]bool{}
	for _, v := range r.validRecords() {
		valid[v.EventID] = true
	}
	for _, tc := range recs {
		id := contract.PeekEventID(tc.rec)
		switch {
		case tc.reason == "" && !valid[id]:
			t.Errorf("%s: not in VALID (rejected %q)", id, got[id])
		case tc.reason != "" && valid[id]:
			t.Errorf("%s: in VALID, want REJECTED %s", id, tc.reason)
		case tc.reason != "" && (len(got[id]) < len(tc.reason) || got[id][:len(tc.reason)] != string(tc.reason)):
			t.Errorf("%s: REJECTED %q, want %s", id, got[id], tc.reason)
		}
	}
}
