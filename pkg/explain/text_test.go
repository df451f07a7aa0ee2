package explain

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestTextNamesTheSourceOfALateEvent (docs/spec.md §3.1): a late event of
// a source with an id says which source sent it; one of RAW written before
// sources had ids says nothing of a source.
func TestTextNamesTheSourceOfALateEvent(t *testing.T) {
	wm := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	e := &Explanation{WindowID: "2026-12-02T10", Late: []Late{
		{EventID: "old-1", Reason: "after_grace", Watermark: wm, Source: "host:/data/backfill.ndjson"},
		{EventID: "old-2", Reason: "after_grace", Watermark: wm},
	}}
	var b bytes.Buffer
	if err := WriteText(&b, e); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(b.String(), "\n")
	var got []string
	for _, l := range lines {
		if strings.Contains(l, "old-") {
			got = append(got, strings.TrimSpace(l))
		}
	}
	if len(got) != 2 || !strings.HasSuffix(got[0], `sent by source "host:/data/backfill.ndjson"`) || strings.Contains(got[1], "source") {
		t.Fatalf("late lines:\n%s", strings.Join(got, "\n"))
	}
}
