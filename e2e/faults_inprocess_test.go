package e2e

import (
	"fmt"
	"reflect"
	"sort"
	"testing"

	"github.com/receiptflow/receiptflow/pkg/failpoint"
	"github.com/receiptflow/receiptflow/pkg/pipeline"
	"github.com/receiptflow/receiptflow/pkg/reconcile"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// comparable is the part of a snapshot that must be identical between a
// clean run and a faulty one: everything but wall-clock fields
// (updated_at, watermark at write time, stale, first_output_version).
type comparable struct {
	WindowID    string
	Count       int64
	Version     int64
	Status      string
	Corrections int64
	LateDropped int64
	Digest      string
	Partitions  string
	// Breakdown is the window's breakdown by store, as text.
	Breakdown string
}

func project(ws []wire.Window) []comparable {
	out := make([]comparable, len(ws))
	for i, w := range ws {
		out[i] = comparable{w.WindowID, w.Count, w.Version, string(w.Status), w.Corrections, w.LateDropped, w.Digest, partialsText(w.Partitions),
			fmt.Sprintf("%+v", w.Breakdown)}
	}
	return out
}

func partialsText(ps []wire.Partial) string {
	var s string
	for _, p := range ps {
		s += " " + itoa(p.Partition) + ":" + itoa(int(p.Count)) + "/" + itoa(int(p.Corrections)) + "/" + itoa(int(p.LateDropped)) + "/" + itoa(int(p.Version))
	}
	return s
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	neg := n < 0
	if neg {
		n = -n
	}
	var b []byte
	for n > 0 {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
	}
	if neg {
		b = append([]byte{'-'}, b...)
	}
	return string(b)
}

func TestInProcessFailpointsEndLikeTheCleanRun(t *testing.T) {
	o := troubled
	o.Events = 8000
	path, _ := writeGenerated(t, o)
	clean := runFile(t, pipeline.Config{DataDir: t.TempDir()}, path)
	for _, spec := range []string{
		"windower.after-write=crash@every:37,validator.after-publish=crash@every:53,publisher.after-put=crash@every:29",
		"windower.before-write=crash@every:7,windower.after-write=crash@every:5",
		"publisher.after-put=crash@every:4,validator.after-publish=crash@every:6",
	} {
		t.Run(spec, func(t *testing.T) {
			fps, err := failpoint.Parse(spec, failpoint.InProcess)
			if err != nil {
				t.Fatal(err)
			}
			// Paced like a live source: batches stay small, so there are
			// enough of them for every failpoint of the spec to fire.
			faulty := runFileAt(t, pipeline.Config{DataDir: t.TempDir(), Failpoints: fps}, path, 2000)
			if len(fps.Fired()) == 0 {
				t.Fatalf("no failpoint fired")
			}
			t.Logf("fired %v, restarts %v", fps.Fired(), faulty.Crashes)
			if got, want := project(faulty.Windows), project(clean.Windows); !reflect.DeepEqual(got, want) {
				t.Fatalf("windows differ from the clean run:\n got %+v\nwant %+v", got, want)
			}
			if !reflect.DeepEqual(sortedLate(faulty.Late), sortedLate(clean.Late)) {
				t.Fatalf("late rows differ: %d vs %d", len(faulty.Late), len(clean.Late))
			}
		})
	}
}

func sortedLate(rows []reconcile.LateRow) []reconcile.LateRow {
	out := append([]reconcile.LateRow(nil), rows...)
	sort.Slice(out, func(i, j int) bool { return out[i].EventID < out[j].EventID })
	return out
}
