package boundedrun

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/failpoint"
	"github.com/receiptflow/receiptflow/pkg/pipeline"
	"github.com/receiptflow/receiptflow/pkg/traffic"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// farFuture are records whose producer wrote a far-future occurred_at and
// a matching ingested_at, as in issue 11, finding 3.
var farFuture = map[string]struct {
	line   string
	reason contract.Reason
}{
	"year 9999": {`{"schema_version":2,"event_id":"far-9999","receipt_id":"r-far","type":"submitted","occurred_at":"9999-12-31T23:59:59.999999999Z","ingested_at":"9999-12-31T23:59:59.999999999Z","partition_key":"store-1","producer_version":"p"}`,
		contract.ReasonBadTimestamp},
	"year 2100": {`{"schema_version":2,"event_id":"far-2100","receipt_id":"r-far","type":"submitted","occurred_at":"2100-01-01T00:00:00Z","ingested_at":"2100-01-01T00:00:00Z","partition_key":"store-1","producer_version":"p"}`,
		contract.ReasonFutureTimestamp},
}

// TestRunFarFutureEvent: one far-future event in an otherwise ordinary
// stream is REJECTED with its reason, the run drains, and every window
// equals the window of a run without it. Before the broker-time bound a
// year-9999 event crash-looped the publisher (its window ends in year
// 10000, which time.MarshalJSON refuses) and the run never drained, and a
// year-2100 event moved the watermark a century ahead, so every later
// ordinary event was judged too late.
func TestRunFarFutureEvent(t *testing.T) {
	var buf bytes.Buffer
	if _, err := traffic.Write(&buf, traffic.Config{Seed: 11, Events: 800, Start: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), Hours: 4}); err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(buf.Bytes(), []byte("\n"))
	clean := runFile(t, "clean", buf.Bytes())
	if len(clean.Windows) < 4 {
		t.Fatalf("the clean run has %d windows, want at least 4", len(clean.Windows))
	}
	for name, far := range farFuture {
		t.Run(name, func(t *testing.T) {
			// Early in the file, so that most ordinary events come after it.
			at := len(lines) / 10
			var data []byte
			for _, l := range lines[:at] {
				data = append(data, l...)
			}
			data = append(data, far.line+"\n"...)
			for _, l := range lines[at:] {
				data = append(data, l...)
			}
			res := runFile(t, name, data)
			id := contract.PeekEventID([]byte(far.line))
			found := false
			for _, r := range res.Rejected {
				if r.EventID == id {
					found = true
					if r.Reason != far.reason {
						t.Errorf("%s REJECTED %s (%s), want %s", id, r.Reason, r.Detail, far.reason)
					}
				}
			}
			if !found {
				t.Errorf("%s is not in REJECTED", id)
			}
			if !res.Report.Holds {
				t.Errorf("parity fails: %+v", res.Report.Summary)
			}
			sameWindows(t, clean.Windows, res.Windows)
		})
	}
}

// runFile runs data through a fresh embedded pipeline and returns the
// result; a run that does not drain fails t.
func runFile(t *testing.T, name string, data []byte) *Result {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "events.ndjson")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	res, err := Run(ctx, Config{Config: pipeline.Config{DataDir: dir}, Events: path})
	if err != nil {
		t.Fatalf("%s run: %v", name, err)
	}
	return res
}

// sameWindows holds got to want window by window: id, count, status,
// corrections and late_dropped.
func sameWindows(t *testing.T, want, got []wire.Window) {
	t.Helper()
	type key struct {
		id                       string
		count, corrections, late int64
		status                   string
	}
	of := func(ws []wire.Window) map[string]key {
		m := map[string]key{}
		for _, w := range ws {
			m[w.WindowID] = key{w.WindowID, w.Count, w.Corrections, w.LateDropped, string(w.Status)}
		}
		return m
	}
	wm, gm := of(want), of(got)
	for id, w := range wm {
		if g, ok := gm[id]; !ok {
			t.Errorf("window %s is missing (clean run: %+v)", id, w)
		} else if g != w {
			t.Errorf("window %s is %+v, want %+v", id, g, w)
		}
	}
	for id, g := range gm {
		if _, ok := wm[id]; !ok {
			t.Errorf("window %s %+v is not in the clean run", id, g)
		}
	}
}

// TestRunStopsWhenStuck: a run whose stage can never progress (a
// failpoint crashes the service on every message) stops with a
// *StuckError naming that stage and its crashes, instead of waiting for
// ever. Before, Run waited until its context ended.
func TestRunStopsWhenStuck(t *testing.T) {
	var buf bytes.Buffer
	if _, err := traffic.Write(&buf, traffic.Config{Seed: 3, Events: 200, Start: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), Hours: 2}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ failpoint, stage string }{
		{"publisher.after-put=crash@every:1", pipeline.Publisher},
		{"validator.after-publish=crash@every:1", pipeline.Validator},
	} {
		t.Run(tc.stage, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "events.ndjson")
			if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			fps, err := failpoint.Parse(tc.failpoint, failpoint.InProcess)
			if err != nil {
				t.Fatal(err)
			}
			// The context is only a backstop: the stall bound must end the
			// run long before it.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			_, err = Run(ctx, Config{Config: pipeline.Config{DataDir: dir, Failpoints: fps}, Events: path, StallTimeout: 5 * time.Second})
			var stuck *StuckError
			if !errors.As(err, &stuck) || !errors.Is(err, ErrStuck) {
				t.Fatalf("Run = %v, want a *StuckError", err)
			}
			if !slices.Contains(stuck.Stages, tc.stage) || stuck.Crashes[tc.stage] == 0 {
				t.Errorf("stuck %+v: want stage %s, crashing", stuck, tc.stage)
			}
			if !strings.Contains(err.Error(), "stuck at "+tc.stage) {
				t.Errorf("error %q does not name %s first", err, tc.stage)
			}
			t.Logf("%v", err)
		})
	}
}
