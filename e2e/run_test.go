package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/boundedrun"
	"github.com/receiptflow/receiptflow/pkg/pipeline"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/traffic"
)

type expected struct {
	Windows []struct {
		WindowID    string `json:"window_id"`
		Count       int64  `json:"count"`
		Corrections int64  `json:"corrections"`
		LateDropped int64  `json:"late_dropped"`
		Status      string `json:"status"`
		Version     int64  `json:"version"`
	} `json:"windows"`
	Late []struct {
		EventID  string `json:"event_id"`
		WindowID string `json:"window_id"`
	} `json:"late"`
	Rejected []struct {
		EventID string `json:"event_id"`
		Reason  string `json:"reason"`
	} `json:"rejected"`
}

// backend is where a run's servers come from.
type backend struct {
	name string
	cfg  func(t *testing.T) pipeline.Config
}

var backends = []backend{
	{"embedded", func(t *testing.T) pipeline.Config { return pipeline.Config{DataDir: t.TempDir()} }},
	{"real-redis", func(t *testing.T) pipeline.Config {
		_, natsURL := testenv.NATS(t)
		r := testenv.RedisServer(t)
		return pipeline.Config{NATSURL: natsURL, RedisURL: r.URL()}
	}},
}

func runFile(t *testing.T, cfg pipeline.Config, path string) *boundedrun.Result {
	t.Helper()
	return runFileAt(t, cfg, path, 0)
}

func runFileAt(t *testing.T, cfg pipeline.Config, path string, rate int) *boundedrun.Result {
	t.Helper()
	return runBounded(t, boundedrun.Config{Config: cfg, Events: path, Rate: rate})
}

// runBounded runs rc with its artifacts in a temporary directory, and
// requires every artifact and parity.
func runBounded(t *testing.T, rc boundedrun.Config) *boundedrun.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out := filepath.Join(t.TempDir(), "out")
	rc.Out = out
	res, err := boundedrun.Run(ctx, rc)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	for _, name := range []string{"windows.json", "late.ndjson", "rejected.ndjson", "parity.json", "parity.md", "trace.ndjson", "metrics.json"} {
		if _, err := os.Stat(filepath.Join(out, name)); err != nil {
			t.Errorf("artifact %s: %v", name, err)
		}
	}
	if !res.Report.Holds {
		md, _ := os.ReadFile(filepath.Join(out, "parity.md"))
		t.Fatalf("parity does not hold:\n%s", md)
	}
	return res
}

func TestSeedFixtureMatchesHandWrittenExpectation(t *testing.T) {
	var want expected
	b, err := os.ReadFile("testdata/seed.expected.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			res := runFile(t, be.cfg(t), "testdata/seed.ndjson")
			if len(res.Windows) != len(want.Windows) {
				t.Fatalf("got %d windows, want %d: %+v", len(res.Windows), len(want.Windows), res.Windows)
			}
			for i, w := range want.Windows {
				g := res.Windows[i]
				if g.WindowID != w.WindowID || g.Count != w.Count || g.Corrections != w.Corrections ||
					g.LateDropped != w.LateDropped || string(g.Status) != w.Status || g.Version != w.Version {
					t.Errorf("window %d = {%s count %d corr %d late %d %s v%d}, want %+v",
						i, g.WindowID, g.Count, g.Corrections, g.LateDropped, g.Status, g.Version, w)
				}
			}
			var gotLate, wantLate []string
			for _, l := range res.Late {
				gotLate = append(gotLate, l.EventID+"@"+l.WindowID)
			}
			for _, l := range want.Late {
				wantLate = append(wantLate, l.EventID+"@"+l.WindowID)
			}
			assertSameSet(t, "late", gotLate, wantLate)
			var gotRej, wantRej []string
			for _, r := range res.Rejected {
				gotRej = append(gotRej, r.EventID+"/"+string(r.Reason))
			}
			for _, r := range want.Rejected {
				wantRej = append(wantRej, r.EventID+"/"+r.Reason)
			}
			assertSameSet(t, "rejected", gotRej, wantRej)
		})
	}
}

func assertSameSet(t *testing.T, what string, got, want []string) {
	t.Helper()
	sort.Strings(got)
	sort.Strings(want)
	if len(got) != len(want) {
		t.Errorf("%s = %v, want %v", what, got, want)
		return
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("%s = %v, want %v", what, got, want)
			return
		}
	}
}

// writeGenerated writes a generated stream with every kind of trouble.
func writeGenerated(t *testing.T, o traffic.Config) (string, traffic.Stats) {
	t.Helper()
	var buf bytes.Buffer
	st, err := traffic.Write(&buf, o)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "events.ndjson")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, st
}

var troubled = traffic.Config{
	Seed: 42, Events: 20000, Start: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), Hours: 12, Stores: 40,
	DupRate: 0.08, DisorderRate: 0.2, LateRate: 0.03, InvalidRate: 0.03, V1Share: 0.3, OtherTypeShare: 0.1,
}

func TestGeneratedStreamExactCounts(t *testing.T) {
	path, st := writeGenerated(t, troubled)
	if st.Duplicates == 0 || st.Disordered == 0 || st.LateAfterGrace == 0 || st.LateWithinGrace == 0 || st.InvalidTotal() == 0 {
		t.Fatalf("generator did not produce every kind of trouble: %+v", st)
	}
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			res := runFile(t, be.cfg(t), path)
			s := res.Report.Summary
			if s.Final != len(res.Windows) || s.Final < 12 {
				t.Fatalf("final windows = %d of %d", s.Final, len(res.Windows))
			}
			var count, corr, late int64
			for _, w := range res.Windows {
				count += w.Count
				corr += w.Corrections
				late += w.LateDropped
			}
			// Every submission the batch pass counted is either counted by
			// the stream or routed late, each exactly once.
			if count+late != int64(s.Counted) {
				t.Fatalf("stream counted %d + late %d != batch counted %d", count, late, s.Counted)
			}
			if late != int64(len(res.Late)) || late == 0 || corr == 0 {
				t.Fatalf("late_dropped %d vs %d late rows, corrections %d", late, len(res.Late), corr)
			}
			if len(res.Rejected) != s.Rejected {
				t.Fatalf("stream rejected %d, batch rejected %d", len(res.Rejected), s.Rejected)
			}
		})
	}
}
