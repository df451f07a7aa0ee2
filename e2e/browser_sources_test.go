package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/wire"
)

// TestBrowserLiveSources (docs/spec.md §3.1): the health panel says how
// many sources of RAW are live, and names them on hover.
func TestBrowserLiveSources(t *testing.T) {
	now := time.Now().UTC()
	at := now.Truncate(time.Hour).Add(-3 * time.Hour)
	src := func(id string, live bool) wire.SourceState {
		return wire.SourceState{ID: id, Progress: now.Add(-time.Minute), LastSeen: now, Live: live}
	}
	b := papercutPage(t, 10*time.Minute, []wire.Window{finalWindow(at, 3)}, wire.Health{
		UpdatedAt: now, SourceLastSeen: now, StaleAfter: "10m0s", Grace: "1h0m0s", GlobalWatermark: now.Add(-5 * time.Minute),
		Watermarks: []time.Time{now, now}, LiveSources: 2, Sources: []wire.PartitionSources{
			{Partition: 0, Sources: []wire.SourceState{src("pos-1", true), src("host:/data/backfill.ndjson", true)}},
			{Partition: 1, Sources: []wire.SourceState{src("pos-1", true), src("gone", false)}},
		},
	})
	got := browserMust[string](b, `document.getElementById('h-sources').textContent`)
	if got != "2 sources hold the watermarks" {
		t.Errorf("#h-sources: %q, want %q", got, "2 sources hold the watermarks")
	}
	names := browserMust[string](b, `document.querySelector('#h-sources .detail').title`)
	if names != "host:/data/backfill.ndjson\npos-1" || strings.Contains(names, "gone") {
		t.Errorf("#h-sources names %q, want the two live sources", names)
	}
}
