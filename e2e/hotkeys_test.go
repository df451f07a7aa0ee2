package e2e

import (
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/pipeline"
	"github.com/receiptflow/receiptflow/pkg/traffic"
	"github.com/receiptflow/receiptflow/pkg/window"
)

// TestHotKeySplitKeepsCounts: one store sends half the traffic. Declared hot
// (--hot-keys store-0=4), its events are spread over four partitions by
// event id, and the publisher's merge gives every window exactly the count,
// digest and corrections of the run without the declaration, with parity
// (which routes the batch pass the same way) holding on both.
func TestHotKeySplitKeepsCounts(t *testing.T) {
	o := traffic.Config{
		Seed: 5, Events: 12000, Start: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), Hours: 8, Stores: 20,
		HotShare: 0.5, DupRate: 0.08, DisorderRate: 0.1, InvalidRate: 0.02, V1Share: 0.3, OtherTypeShare: 0.1,
	}
	path, _ := writeGenerated(t, o)
	plain := runFile(t, pipeline.Config{DataDir: t.TempDir()}, path)
	hot := window.HotKeys{"store-0": 4}
	split := runFile(t, pipeline.Config{DataDir: t.TempDir(), HotKeys: hot}, path)

	if len(plain.Windows) != len(split.Windows) || len(plain.Windows) < 8 {
		t.Fatalf("%d windows split, %d plain", len(split.Windows), len(plain.Windows))
	}
	home := window.Partition("store-0", 8)
	spread := map[int]int64{}
	for i, w := range split.Windows {
		p := plain.Windows[i]
		if w.WindowID != p.WindowID || w.Count != p.Count || w.Digest != p.Digest || w.Corrections != p.Corrections ||
			w.LateDropped != p.LateDropped || w.Status != p.Status {
			t.Fatalf("window %s: split %d/%s/%d/%d %s, plain %d/%s/%d/%d %s", w.WindowID,
				w.Count, w.Digest, w.Corrections, w.LateDropped, w.Status, p.Count, p.Digest, p.Corrections, p.LateDropped, p.Status)
		}
		for _, part := range w.Partitions {
			spread[part.Partition] += part.Count
		}
	}
	// Without the split store-0's half of the traffic sits in its home
	// partition; with it, the home and the three after it share it.
	var homePlain int64
	for _, w := range plain.Windows {
		for _, part := range w.Partitions {
			if part.Partition == home {
				homePlain += part.Count
			}
		}
	}
	for k := 0; k < 4; k++ {
		if spread[(home+k)%8] == 0 {
			t.Fatalf("partition %d got nothing of the hot key: %v", (home+k)%8, spread)
		}
	}
	if spread[home] >= homePlain*3/4 {
		t.Fatalf("home partition %d still counts %d of the %d it had unsplit", home, spread[home], homePlain)
	}
	t.Logf("home partition %d: %d counted unsplit, %d split; per partition %v", home, homePlain, spread[home], spread)
}
