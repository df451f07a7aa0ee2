package e2e

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/receiptflow/receiptflow/pkg/pipeline"
	"github.com/receiptflow/receiptflow/pkg/reconcile"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// TestLegacyRawReplaysUnchanged (docs/spec.md §3.1): RAW written before
// sources had ids (testdata/legacy-raw, from the code before §3.1) is one
// source. Stored in a fresh RAW and run through today's services, it gives
// the windows and LATE rows it gave then, and today's referee agrees.
func TestLegacyRawReplaysUnchanged(t *testing.T) {
	dir := filepath.Join("testdata", "legacy-raw")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, err := pipeline.Start(ctx, pipeline.Config{DataDir: t.TempDir(), PublisherTick: 100 * time.Millisecond, KeepHistory: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)

	f, err := os.Open(filepath.Join(dir, "raw.ndjson.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(zr)
	sc.Buffer(nil, 1<<20)
	n := 0
	for sc.Scan() {
		var m struct {
			Subject string              `json:"subject"`
			Header  map[string][]string `json:"header"`
			Data    string              `json:"data"`
		}
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		msg := nats.NewMsg(m.Subject)
		msg.Data = []byte(m.Data)
		for k, v := range m.Header {
			// The atomic batches it was stored in are not stored again:
			// each message goes alone, in the same order.
			if strings.HasPrefix(k, "Nats-Batch-") || k == wire.HdrBatchLasts {
				continue
			}
			msg.Header[k] = v
		}
		if _, err := p.Admin.JS.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
		n++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitDrained(ctx, nil); err != nil {
		t.Fatal(err)
	}

	got, err := p.Windows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var want []wire.Window
	readJSON(t, filepath.Join(dir, "windows.json"), &want)
	if len(got) != len(want) {
		t.Fatalf("%d windows, then %d", len(got), len(want))
	}
	for i := range want {
		// When the publisher wrote what it saw (the watermark at the
		// write, the version of the first in-grace write) depends on its
		// timing; what the records made of the window does not.
		g, w := got[i], want[i]
		g.UpdatedAt, w.UpdatedAt = time.Time{}, time.Time{}
		g.Watermark, w.Watermark = time.Time{}, time.Time{}
		g.FirstOutputVersion, w.FirstOutputVersion = 0, 0
		gb, _ := json.Marshal(g)
		wb, _ := json.Marshal(w)
		if string(gb) != string(wb) {
			t.Errorf("window %s differs from the run before sources:\n got %s\nthen %s", w.WindowID, gb, wb)
		}
	}
	late, err := p.LateRows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "late.ndjson"))
	if err != nil {
		t.Fatal(err)
	}
	var thenLate []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r reconcile.LateRow
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		thenLate = append(thenLate, r.EventID+" "+r.WindowID+" "+r.Reason+" "+r.Watermark.UTC().Format(time.RFC3339))
	}
	var nowLate []string
	for _, r := range late {
		nowLate = append(nowLate, r.EventID+" "+r.WindowID+" "+r.Reason+" "+r.Watermark.UTC().Format(time.RFC3339))
	}
	slices.Sort(thenLate) // LATE is read partition by partition
	slices.Sort(nowLate)
	if strings.Join(nowLate, "\n") != strings.Join(thenLate, "\n") {
		t.Errorf("LATE rows differ from the run before sources:\n got %d: %v\nthen %d: %v", len(nowLate), nowLate, len(thenLate), thenLate)
	}

	batch, _, err := reconcile.CountRaw(ctx, p.Admin.JS, wire.Raw, reconcile.Config{Validator: p.Validator,
		Partitions: 8, Lateness: p.Config().Lateness, Grace: p.Config().Grace, Horizon: p.Config().ReplayHorizon})
	if err != nil {
		t.Fatal(err)
	}
	if rep := reconcile.Compare(batch, got, late); !rep.Holds {
		rb, _ := json.MarshalIndent(rep, "", "  ")
		t.Fatalf("parity over the RAW written before sources:\n%s", rb)
	}
	t.Logf("%d RAW messages of the run before sources: %d windows and %d LATE rows as then, parity holds", n, len(got), len(late))
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}
