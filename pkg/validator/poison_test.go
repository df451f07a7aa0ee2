package validator

// Poison messages (docs/bad-input.md, last row): a RAW record whose
// processing keeps failing must end in REJECTED after a bounded number of
// deliveries, and whatever goes wrong with one record must end as that
// record's rejection instead of failing its batch on every delivery.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/ledger"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// rig is a validator over a real nats-server and a miniredis, driven one
// batch at a time.
type rig struct {
	t     *testing.T
	ctx   context.Context
	js    jetstream.JetStream
	mr    *miniredis.Miniredis
	s     *Service
	names wire.Names
	cons  jetstream.Consumer
}

func newRig(t *testing.T, maxDeliveries int) *rig {
	t.Helper()
	return newRigWith(t, maxDeliveries, nil)
}

// newRigWith is newRig with the validator's metrics on reg.
func newRigWith(t *testing.T, maxDeliveries int, reg prometheus.Registerer) *rig {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	_, url := testenv.NATS(t)
	js := testenv.JetStream(t, url)
	names := wire.For("")
	if err := stream.Ensure(ctx, js, names, stream.Config{Partitions: 8}); err != nil {
		t.Fatal(err)
	}
	mr := testenv.Miniredis(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	store := ledger.NewStore(rdb, ledger.Config{Keys: ledger.Keys{Prefix: names.RedisPrefix()}, Lateness: 5 * time.Minute, Grace: time.Hour})
	v, err := contract.NewValidator(contract.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s := New(js, store, Config{Names: names, Partitions: 8, Validator: v, MaxDeliveries: maxDeliveries, Registerer: reg,
		Now: func() time.Time { return time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC) }})
	// The production consumer's shape (ack all, RAW partition 0), with a
	// short ack wait so that an unacknowledged batch comes back quickly
	// with its delivery count raised.
	cons, err := js.CreateConsumer(ctx, names.Stream(wire.Raw), jetstream.ConsumerConfig{
		Durable: "poison-test", FilterSubject: names.Subject(wire.Raw, 0),
		AckPolicy: jetstream.AckAllPolicy, AckWait: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &rig{t: t, ctx: ctx, js: js, mr: mr, s: s, names: names, cons: cons}
}

// publish puts records on RAW partition 0, as ingest would.
func (r *rig) publish(recs ...[]byte) {
	r.t.Helper()
	for i, rec := range recs {
		id := fmt.Sprintf("raw-%d-%d", time.Now().UnixNano(), i)
		if _, err := r.js.PublishMsg(r.ctx, stream.NewMsg(r.names.Subject(wire.Raw, 0), id, rec)); err != nil {
			r.t.Fatal(err)
		}
	}
}

// fetch returns the next n deliveries of the consumer.
func (r *rig) fetch(n int) []jetstream.Msg {
	r.t.Helper()
	var out []jetstream.Msg
	for len(out) < n {
		b, err := r.cons.Fetch(n-len(out), jetstream.FetchMaxWait(3*time.Second))
		if err != nil {
			r.t.Fatal(err)
		}
		for m := range b.Messages() {
			out = append(out, m)
		}
		if b.Error() != nil {
			r.t.Fatal(b.Error())
		}
	}
	return out
}

// handle handles batch as the consume loop does: the handler, then, if it
// succeeded, one ack of the last message.
func (r *rig) handle(batch []jetstream.Msg) error {
	r.t.Helper()
	if err := r.s.handle(r.ctx, 0, batch); err != nil {
		return err
	}
	return batch[len(batch)-1].Ack()
}

// read returns every message of a stream.
// validRecords reads every record of VALID.
func (r *rig) validRecords() []stream.ValidRecord {
	r.t.Helper()
	var out []stream.ValidRecord
	if err := stream.ReadValid(r.ctx, r.js, r.names.Stream(wire.Valid), func(v stream.ValidRecord) error {
		out = append(out, v)
		return nil
	}); err != nil {
		r.t.Fatal(err)
	}
	return out
}

func (r *rig) read(base string) []jetstream.Msg {
	r.t.Helper()
	var out []jetstream.Msg
	if err := stream.ReadAll(r.ctx, r.js, r.names.Stream(base), func(m jetstream.Msg) error {
		out = append(out, m)
		return nil
	}); err != nil {
		r.t.Fatal(err)
	}
	return out
}

func record(id string) []byte {
	return []byte(`{"schema_version":2,"event_id":"` + id + `","receipt_id":"r1","type":"submitted",` +
		`"occurred_at":"2026-12-02T10:15:00Z","ingested_at":"2026-12-02T10:16:00Z","partition_key":"store-a","producer_version":"p"}`)
}

// TestPoisonGoesToRejectedAfterMaxDeliveries: a record whose batch keeps
// failing (here: Redis refuses the claim on every try) is delivered again
// and again; the delivery after the limit routes it to REJECTED without
// validating or claiming it, and acknowledges it, so the partition moves
// on. Before the limit it is processed normally.
func TestPoisonGoesToRejectedAfterMaxDeliveries(t *testing.T) {
	const limit = 3
	r := newRig(t, limit)
	r.publish(record("poison-1"))
	r.mr.SetError("LOADING poisoned for the test")
	for i := 1; i <= limit; i++ {
		m := r.fetch(1)
		meta, _ := m[0].Metadata()
		if meta.NumDelivered != uint64(i) {
			t.Fatalf("delivery %d has NumDelivered %d", i, meta.NumDelivered)
		}
		if err := r.handle(m); err == nil {
			t.Fatalf("delivery %d: handle succeeded while Redis fails", i)
		}
	}
	m := r.fetch(1)
	meta, _ := m[0].Metadata()
	if meta.NumDelivered != limit+1 {
		t.Fatalf("NumDelivered %d, want %d", meta.NumDelivered, limit+1)
	}
	if err := r.handle(m); err != nil {
		t.Fatalf("delivery %d: %v, want the record given up as poison", limit+1, err)
	}
	r.mr.SetError("")

	rej := r.read(wire.Rejected)
	if len(rej) != 1 {
		t.Fatalf("REJECTED holds %d messages, want 1", len(rej))
	}
	h := rej[0].Headers()
	if h.Get(wire.HdrReason) != string(contract.ReasonInvalidField) || h.Get(wire.HdrEventID) != "poison-1" || h.Get(wire.HdrRawSeq) != "1" {
		t.Errorf("REJECTED headers %v", h)
	}
	if d := h.Get(wire.HdrDetail); !strings.Contains(d, "poison message: not processed after 3 deliveries") {
		t.Errorf("detail %q", d)
	}
	if !bytes.Equal(rej[0].Data(), record("poison-1")) {
		t.Errorf("REJECTED body %q is not the raw record", rej[0].Data())
	}
	if n := len(r.read(wire.Valid)); n != 0 {
		t.Errorf("VALID holds %d messages", n)
	}
	if keys := r.mr.Keys(); len(keys) != 0 {
		t.Errorf("the poison record left Redis keys %v", keys)
	}
	info, err := r.cons.Info(r.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.AckFloor.Stream != 1 || info.NumAckPending != 0 || info.NumPending != 0 {
		t.Errorf("consumer not past the poison record: ack floor %d, ack pending %d, pending %d",
			info.AckFloor.Stream, info.NumAckPending, info.NumPending)
	}

	// The same record published again is an ordinary record again.
	r.publish(record("poison-1"))
	if err := r.s.handle(r.ctx, 0, r.fetch(1)); err != nil {
		t.Fatal(err)
	}
	if n := len(r.read(wire.Valid)); n != 1 {
		t.Errorf("VALID holds %d messages after a clean delivery, want 1", n)
	}
}

// TestPoisonGuardDefault: zero means DefaultMaxDeliveries (5); negative
// turns the guard off.
func TestPoisonGuardDefault(t *testing.T) {
	if got := New(nil, nil, Config{Validator: &contract.Validator{}}).cfg.MaxDeliveries; got != DefaultMaxDeliveries || DefaultMaxDeliveries != 5 {
		t.Errorf("MaxDeliveries default %d", got)
	}
	off := New(nil, nil, Config{Validator: &contract.Validator{}, MaxDeliveries: -1})
	if rej := off.poison(&jetstream.MsgMetadata{NumDelivered: 1 << 40}, nil); rej != nil {
		t.Errorf("guard off, yet %v", rej)
	}
	on := New(nil, nil, Config{Validator: &contract.Validator{}})
	if on.poison(&jetstream.MsgMetadata{NumDelivered: 5}, nil) != nil || on.poison(&jetstream.MsgMetadata{NumDelivered: 6}, nil) == nil {
		t.Error("default guard does not fire exactly after 5 deliveries")
	}
}

// TestOneRecordFailingIsItsOwnRejection: a record that makes Validate panic,
// or return an error that is not a contract violation, is rejected
// invalid_field on its first delivery; the batch around it goes through.
// Before, such a record failed the batch, the instance restarted, the
// consumer was recreated and the same batch failed again, for ever.
func TestOneRecordFailingIsItsOwnRejection(t *testing.T) {
	r := newRig(t, 0)
	inner := r.s.validate
	r.s.validate = func(raw []byte, at time.Time) (contract.Checked, error) {
		switch {
		case bytes.Contains(raw, []byte("boom")):
			panic("boom\r\nRf-Kind: s")
		case bytes.Contains(raw, []byte("odd")):
			return contract.Checked{}, errors.New("the disk is on fire")
		}
		return inner(raw, at)
	}
	r.publish(record("good-1"), record("boom-1"), record("odd-1"), record("good-2"))
	if err := r.s.handle(r.ctx, 0, r.fetch(4)); err != nil {
		t.Fatalf("handle: %v", err)
	}
	var got []string
	for _, m := range r.read(wire.Rejected) {
		h := m.Headers()
		got = append(got, h.Get(wire.HdrEventID)+"/"+h.Get(wire.HdrReason)+"/"+h.Get(wire.HdrRawSeq))
		d := h.Get(wire.HdrDetail)
		if strings.ContainsAny(d, "\r\n") || len(h.Values("Rf-Kind")) != 0 {
			t.Errorf("detail %q leaked into the headers %v", d, h)
		}
		if !strings.Contains(d, "panicked") && !strings.Contains(d, "the disk is on fire") {
			t.Errorf("detail %q", d)
		}
	}
	if want := "boom-1/invalid_field/2 odd-1/invalid_field/3"; strings.Join(got, " ") != want {
		t.Errorf("REJECTED %v, want %s", got, want)
	}
	var valid []string
	for _, v := range r.validRecords() {
		valid = append(valid, v.EventID)
	}
	if strings.Join(valid, " ") != "good-1 good-2" {
		t.Errorf("VALID %v", valid)
	}
}

// TestRejectedCopyIsBounded: a RAW record near the server's max_payload
// (published by something other than ingest, which cuts long records) used
// to make its REJECTED copy, the record plus headers, exceed max_payload:
// the publish failed on every delivery and the partition stopped for good.
// The copy is now cut to wire.KeepBytes with the full size in a header.
func TestRejectedCopyIsBounded(t *testing.T) {
	r := newRig(t, 0)
	maxPayload := int(r.js.Conn().MaxPayload())
	// 64 bytes under max_payload: RAW takes it, a REJECTED copy with five
	// headers would not fit.
	big := []byte(`{"event_id":"huge-1","x":"`)
	big = append(big, bytes.Repeat([]byte("x"), maxPayload-64-len(big))...)
	r.publish(big, record("after-1"))
	if err := r.s.handle(r.ctx, 0, r.fetch(2)); err != nil {
		t.Fatalf("handle: %v", err)
	}
	rej := r.read(wire.Rejected)
	if len(rej) != 1 {
		t.Fatalf("REJECTED holds %d messages", len(rej))
	}
	h := rej[0].Headers()
	keep := wire.KeepBytes(contract.DefaultMaxSize, int64(maxPayload))
	if h.Get(wire.HdrReason) != "too_large" || h.Get(wire.HdrEventID) != "huge-1" ||
		h.Get(wire.HdrOrigSize) != strconv.Itoa(len(big)) || len(rej[0].Data()) != keep ||
		!strings.Contains(h.Get(wire.HdrDetail), fmt.Sprintf("record is %d bytes", len(big))) {
		t.Errorf("REJECTED %v with %d bytes (keep %d)", h, len(rej[0].Data()), keep)
	}
	if v := r.validRecords(); len(v) != 1 || v[0].EventID != "after-1" {
		t.Errorf("VALID holds %+v, want the record after the big one", v)
	}
}

// TestValidHeartbeatIDsCannotCollide: VALID message ids (a frame's:
// partition and RAW range) hold '/', outside the event id alphabet, so an
// event named like a heartbeat or a frame can neither drop one nor be
// dropped by one: the heartbeat and the event named like the old heartbeat
// ids ("hb-<p>-<seq>") are both in VALID, and the event named like a
// message id with '/' is rejected.
func TestValidHeartbeatIDsCannotCollide(t *testing.T) {
	r := newRig(t, 0)
	hb := stream.NewMsg(r.names.Subject(wire.Raw, 0), "hb-raw-1", nil)
	hb.Header.Set(wire.HdrHeartbeat, "1764670000000")
	if _, err := r.js.PublishMsg(r.ctx, hb); err != nil {
		t.Fatal(err)
	}
	r.publish(record("hb-0-1"), record("vf/0/1-2"))
	if err := r.s.handle(r.ctx, 0, r.fetch(3)); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range r.validRecords() {
		got = append(got, fmt.Sprintf("%c:%s@%d in %s", v.Kind, v.EventID, v.RawSeq, v.MsgID))
	}
	if want := "h:@1 in vf/0/1-2 s:hb-0-1@2 in vf/0/1-2"; strings.Join(got, " ") != want {
		t.Errorf("VALID records %v, want %s", got, want)
	}
	if rej := r.read(wire.Rejected); len(rej) != 1 || rej[0].Headers().Get(wire.HdrReason) != "invalid_field" {
		t.Errorf("an event id with '/' was not rejected: %d", len(rej))
	}
	if contract.PeekEventID(record("vf/0/1-2")) != "" {
		t.Error("'/' is in the id alphabet")
	}
}

// TestConflictSurvivesHostileIngestedAt (docs/bad-input.md, "same event_id,
// different payload"): ingested_at is written by the producer when it
// wants to, so it must not decide whether a conflicting duplicate is
// caught. A record that claims to be ingested days later, or a conflicting
// record that claims to be ingested days earlier, must not let a second
// version of a counted event through.
func TestConflictSurvivesHostileIngestedAt(t *testing.T) {
	rec := func(id, occurred, ingested, payload string) []byte {
		return []byte(`{"schema_version":2,"event_id":"` + id + `","receipt_id":"r1","type":"submitted","occurred_at":"` + occurred +
			`","ingested_at":"` + ingested + `","partition_key":"store-a","producer_version":"p","payload":` + payload + `}`)
	}
	// The times are days before today: a record ingested after the broker
	// stored it is future_timestamp (docs/spec.md §2), not a hostile valid
	// record, so "3 days later" must still lie in the past.
	day0 := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -7)
	at := func(days int, clock string) string {
		return day0.AddDate(0, 0, days).Format("2006-01-02") + "T" + clock + "Z"
	}
	for _, tc := range []struct {
		name     string
		between  []byte
		conflict []byte
	}{
		{"a record ingested 3 days later in between",
			rec("other-1", at(3, "10:20:00"), at(6, "10:00:00"), `{}`),
			rec("x-1", at(3, "11:15:00"), at(3, "11:16:00"), `{"v":2}`)},
		{"the conflicting record ingested 4 days earlier", nil,
			rec("x-1", at(-1, "11:15:00"), at(-1, "11:16:00"), `{"v":2}`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, 0)
			batches := [][]byte{rec("x-1", at(3, "10:15:00"), at(3, "10:16:00"), `{"v":1}`), tc.between, tc.conflict}
			for _, b := range batches {
				if b == nil {
					continue
				}
				r.publish(b)
				if err := r.s.handle(r.ctx, 0, r.fetch(1)); err != nil {
					t.Fatal(err)
				}
			}
			var rejected []string
			for _, m := range r.read(wire.Rejected) {
				rejected = append(rejected, m.Headers().Get(wire.HdrEventID)+"/"+m.Headers().Get(wire.HdrReason))
			}
			if strings.Join(rejected, " ") != "x-1/conflicting_duplicate" {
				t.Errorf("REJECTED %v, want x-1/conflicting_duplicate: the second version of x-1 went to VALID and counts in another window", rejected)
			}
		})
	}
}
