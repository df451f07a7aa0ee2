package traffic_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/traffic"
	"github.com/receiptflow/receiptflow/pkg/window"
)

// received is the received time the tests judge generated records at: a
// fixed instant after all of their traffic (every record carries its own
// ingested_at; the received time only bounds it, docs/spec.md §2).
var received = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func write(t *testing.T, o traffic.Config) ([]byte, traffic.Stats) {
	t.Helper()
	var buf bytes.Buffer
	st, err := traffic.Write(&buf, o)
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), st
}

func lines(data []byte) []string {
	return strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
}

func TestDeterministic(t *testing.T) {
	o := traffic.DefaultConfig()
	o.Events = 5000
	a, sa := write(t, o)
	b, sb := write(t, o)
	if !bytes.Equal(a, b) {
		t.Fatal("same options, different bytes")
	}
	if sa.Records != sb.Records || sa.Bytes != sb.Bytes || !maps.Equal(sa.Invalid, sb.Invalid) {
		t.Fatal("same options, different stats")
	}
	o.Seed++
	c, _ := write(t, o)
	if bytes.Equal(a, c) {
		t.Fatal("another seed, same bytes")
	}
	if sa.Records != 5000 || sa.Bytes != int64(len(a)) || len(lines(a)) != 5000 {
		t.Fatalf("records %d bytes %d, file %d lines %d bytes", sa.Records, sa.Bytes, len(lines(a)), len(a))
	}
}

var update = flag.Bool("update", false, "rewrite testdata/golden.ndjson")

// TestGolden pins the exact output of a small, fault-heavy seed, so that a
// change of the generator's byte stream is a deliberate one (go test
// -update rewrites the file).
func TestGolden(t *testing.T) {
	o := traffic.Config{
		Seed: 3, Events: 60, Hours: 3, Stores: 3, HotShare: 0.5, DupRate: 0.1, DisorderRate: 0.2,
		LateRate: 0.1, InvalidRate: 0.15, V1Share: 0.3, OtherTypeShare: 0.2, PayloadBytes: 80,
	}
	data, _ := write(t, o)
	path := filepath.Join("testdata", "golden.ndjson")
	if *update {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, want) {
		t.Errorf("output differs from %s (go test -update rewrites it)", path)
	}
}

// TestEveryRecordIsWhatStatsSay validates every line with the contract
// validator, keeping the claims a validator with a fingerprint store keeps,
// and holds the tallies to Stats exactly.
func TestEveryRecordIsWhatStatsSay(t *testing.T) {
	o := traffic.DefaultConfig()
	o.Seed, o.Events, o.InvalidRate, o.DupRate = 9, 20000, 0.05, 0.05
	data, st := write(t, o)
	v, err := contract.NewValidator(contract.Config{})
	if err != nil {
		t.Fatal(err)
	}
	claims := map[string]uint64{}
	reasons := map[contract.Reason]int{}
	seen := map[string]bool{}
	var dups, submissions, other, v1 int
	for i, line := range lines(data) {
		ev, err := v.Validate([]byte(line), received)
		if err != nil {
			var re *contract.RejectError
			if !errors.As(err, &re) {
				t.Fatalf("line %d: %v", i+1, err)
			}
			reasons[re.Reason]++
			continue
		}
		if ev.IngestedAt.IsZero() || ev.IngestedAt.Year() < 2026 {
			t.Fatalf("line %d: no ingested_at", i+1)
		}
		if fp, ok := claims[ev.EventID]; ok {
			if fp != ev.Fingerprint {
				reasons[contract.ReasonConflictingDuplicate]++
				continue
			}
			if !seen[line] {
				t.Fatalf("line %d: a retry that is not byte-identical to an earlier record", i+1)
			}
			dups++
			continue
		}
		claims[ev.EventID] = ev.Fingerprint
		seen[line] = true
		if ev.SchemaVersion == 1 {
			v1++
		}
		if ev.Counts() {
			submissions++
		} else {
			other++
		}
		if !strings.HasPrefix(ev.EventID, "evt-9-") || !strings.HasPrefix(ev.PartitionKey, "store-") {
			t.Fatalf("line %d: id %q key %q", i+1, ev.EventID, ev.PartitionKey)
		}
	}
	if !maps.Equal(reasons, st.Invalid) {
		t.Errorf("rejected by reason %v, stats %v", reasons, st.Invalid)
	}
	if len(st.Invalid) != 9 {
		t.Errorf("reasons generated: %v", st.Invalid)
	}
	if dups != st.Duplicates || submissions != st.Submissions || other != st.Other || v1 != st.V1 ||
		submissions+other != st.Events {
		t.Errorf("dups %d submissions %d other %d v1 %d; stats %+v", dups, submissions, other, v1, st)
	}
	if st.Duplicates < 500 || st.LateAfterGrace < 30 || st.LateWithinGrace < 30 || st.Disordered < 1000 {
		t.Errorf("too few faults for the rates: %+v", st)
	}
}

// TestShape checks the first event time, the span, the skew and the record
// size.
func TestShape(t *testing.T) {
	o := traffic.DefaultConfig()
	o.Start = time.Date(2026, 3, 1, 6, 0, 0, 0, time.UTC)
	o.Hours, o.Events, o.Stores, o.HotShare = 6, 6000, 5, 0.5
	data, st := write(t, o)
	if !st.FirstEvent.Equal(o.Start) {
		t.Errorf("first event %s, want %s", st.FirstEvent, o.Start)
	}
	if end := o.Start.Add(6 * time.Hour); st.MaxEvent.Before(end.Add(-10*time.Minute)) || !st.MaxEvent.Before(end) {
		t.Errorf("max event %s, want just before %s", st.MaxEvent, end)
	}
	v, _ := contract.NewValidator(contract.Config{})
	keys := map[string]int{}
	var valid, size int
	for _, line := range lines(data) {
		ev, err := v.Validate([]byte(line), received)
		if err != nil {
			continue
		}
		keys[ev.PartitionKey]++
		valid++
		size += len(line)
	}
	if len(keys) != 5 {
		t.Errorf("keys %v, want 5", keys)
	}
	if share := float64(keys["store-0"]) / float64(valid); share < 0.45 || share > 0.55 {
		t.Errorf("hot share %.2f, want about 0.5", share)
	}
	if avg := size / valid; avg < 350 || avg > 450 {
		t.Errorf("average valid record %d bytes, want about 400", avg)
	}
	var first struct {
		OccurredAt string `json:"occurred_at"`
	}
	if err := json.Unmarshal([]byte(lines(data)[0]), &first); err != nil || first.OccurredAt != "2026-03-01T06:00:00.000Z" {
		t.Errorf("first record %q (%v)", lines(data)[0], err)
	}
}

// TestCleanByDefault: zero rates give in-order, valid, unique submissions
// only.
func TestCleanByDefault(t *testing.T) {
	data, st := write(t, traffic.Config{Events: 500})
	if st.Submissions != 500 || st.Duplicates+st.InvalidTotal()+st.LateAfterGrace+st.Disordered+st.V1 != 0 {
		t.Fatalf("stats %+v", st)
	}
	v, _ := contract.NewValidator(contract.Config{})
	prev := int64(0)
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		ev, err := v.Validate(sc.Bytes(), received)
		if err != nil {
			t.Fatal(err)
		}
		ms := window.Ms(ev.OccurredAt)
		if ms < prev {
			t.Fatalf("event time went back at %s", ev.EventID)
		}
		prev = ms
	}
}

func TestOptionErrors(t *testing.T) {
	for _, o := range []traffic.Config{
		{Events: -1},
		{Hours: -2},
		{DupRate: 0.6, InvalidRate: 0.3, LateRate: 0.2},
		{HotShare: 1.5},
		{V1Share: -0.1},
		{Start: time.Date(1999, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		if _, err := traffic.Write(&bytes.Buffer{}, o); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("full") }

func TestWriteError(t *testing.T) {
	if _, err := traffic.Write(failWriter{}, traffic.Config{Events: 5000}); err == nil {
		t.Fatal("write error not returned")
	}
}
