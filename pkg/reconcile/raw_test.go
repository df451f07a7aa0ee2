package reconcile_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/ingest"
	"github.com/receiptflow/receiptflow/pkg/reconcile"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/traffic"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// verdicts renders what a batch decided, independent of where its records
// came from: every window's counts and digest, every too-late verdict
// (without its sequence) and the final partition watermarks.
func verdicts(b *reconcile.Batch) []string {
	var out []string
	for _, w := range b.Summary().Windows {
		out = append(out, fmt.Sprintf("window %s count %d corrections %d late %d digest %s partitions %v",
			w.WindowID, w.Count, w.Corrections, w.LateDropped, w.Digest, w.Partitions))
	}
	for _, l := range b.Late {
		out = append(out, fmt.Sprintf("late %s %s %s %s p%d", l.EventID, l.WindowID, l.Reason, l.Watermark.Format(time.RFC3339Nano), l.Partition))
	}
	return append(out, fmt.Sprint("watermarks ", b.Watermark()))
}

// TestCountRawEqualsCountOfTheFile: a file ingested into RAW by pkg/ingest
// (heartbeats every 7 records, end of stream) and read back with
// CountRaw gives the verdicts Count gives for the file with the same
// heartbeat placement: the file source simulates ingest exactly. The file
// has a partition that is idle for most of it, so where the heartbeats
// fall decides one event's watermark; with another heartbeat period the
// verdicts differ.
func TestCountRawEqualsCountOfTheFile(t *testing.T) {
	const partitions = 64
	o := traffic.DefaultConfig()
	o.Seed, o.Events, o.Hours = 21, 3000, 6
	o.LateRate, o.InvalidRate, o.DupRate = 0.03, 0.02, 0.03
	var body bytes.Buffer
	if _, err := traffic.Write(&body, o); err != nil {
		t.Fatal(err)
	}
	slow := idlePartitionKey(t, body.Bytes(), partitions)
	at := func(d time.Duration) string { return o.Start.Add(d).UTC().Format(time.RFC3339) }
	rec := func(id, occurred string) string {
		return fmt.Sprintf(`{"schema_version":2,"event_id":%q,"receipt_id":"r","type":"submitted","occurred_at":%q,"ingested_at":%q,"partition_key":%q,"producer_version":"t"}`+"\n",
			id, occurred, at(7*time.Hour), slow)
	}
	var buf bytes.Buffer
	buf.WriteString(rec("slow-1", at(0)))
	buf.Write(body.Bytes())
	buf.WriteString(rec("slow-2", at(10*time.Minute))) // too late, against a heartbeat's watermark
	data := buf.Bytes()
	v, err := contract.NewValidator(contract.Config{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)

	_, url := testenv.NATS(t)
	js := testenv.JetStream(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := stream.Ensure(ctx, js, wire.For(""), stream.Config{Partitions: partitions}); err != nil {
		t.Fatal(err)
	}
	in := ingest.New(js, ingest.Config{Partitions: partitions, Validator: v, HeartbeatEvery: 7,
		EndOfStream: true, Now: func() time.Time { return now }})
	st, err := ingest.File(ctx, in, bytes.NewReader(data), nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Heartbeats < 100 {
		t.Fatalf("only %d heartbeats", st.Heartbeats)
	}

	fromRaw, last, err := reconcile.CountRaw(ctx, js, wire.Raw, reconcile.Config{Validator: v, DefaultIngestedAt: now, Partitions: partitions})
	if err != nil {
		t.Fatal(err)
	}
	if last == 0 || fromRaw.Heartbeats != int(st.Heartbeats)*partitions {
		t.Fatalf("read RAW to %d, %d heartbeats replayed, ingest sent %d to %d partitions", last, fromRaw.Heartbeats, st.Heartbeats, partitions)
	}
	file := func(every int) *reconcile.Batch {
		b, err := reconcile.Count(bytes.NewReader(data), reconcile.Config{Validator: v, DefaultIngestedAt: now,
			Partitions: partitions, HeartbeatEvery: every, EndOfStream: true})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	fromFile := file(7)
	if lv, ok := fromFile.LateJudgmentOf("slow-2"); !ok || len(fromFile.Late) < 2 {
		t.Fatalf("slow-2 not judged too late (%+v), %d too late in all", lv, len(fromFile.Late))
	}
	if slices.Equal(verdicts(file(1000)), verdicts(fromFile)) {
		t.Fatal("the heartbeat period changes nothing here: the test cannot fail")
	}
	got, want := verdicts(fromRaw), verdicts(fromFile)
	if !slices.Equal(got, want) {
		for i := range min(len(got), len(want)) {
			if got[i] != want[i] {
				t.Fatalf("RAW and file differ at %d:\n RAW  %s\n file %s", i, got[i], want[i])
			}
		}
		t.Fatalf("RAW gives %d lines, the file %d", len(got), len(want))
	}
}

// idlePartitionKey returns a partition key whose partition no record of
// data uses.
func idlePartitionKey(t *testing.T, data []byte, partitions int) string {
	t.Helper()
	used := map[int]bool{}
	for _, line := range bytes.Split(data, []byte{'\n'}) {
		var rec struct {
			PartitionKey string `json:"partition_key"`
		}
		if json.Unmarshal(line, &rec) == nil {
			used[window.Partition(rec.PartitionKey, partitions)] = true
		}
	}
	for i := range 10000 {
		if key := fmt.Sprintf("slow-%d", i); !used[window.Partition(key, partitions)] {
			return key
		}
	}
	t.Fatal("every partition is used")
	return ""
}
