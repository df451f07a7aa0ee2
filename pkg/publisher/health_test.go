package publisher

import (
	"reflect"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/wire"
)

func TestRecentFiguresCoverTheLastMinute(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	sample := func(sec int, late uint64, corr int64, counted ...int64) healthSample {
		return healthSample{at: t0.Add(time.Duration(sec) * time.Second), late: late, corrections: corr, counted: counted}
	}
	steps := []struct {
		cur     healthSample
		late    uint64
		corr    int64
		recent  []int64
		hottest []wire.PartitionHeat
	}{
		// The first sample is its own baseline: nothing yet.
		{sample(0, 5, 2, 10, 10, 10, 10), 0, 0, []int64{0, 0, 0, 0}, []wire.PartitionHeat{}},
		// Within the first minute: everything since the start.
		{sample(30, 7, 3, 14, 10, 11, 20), 2, 1, []int64{4, 0, 1, 10}, []wire.PartitionHeat{{Partition: 3, Recent: 10}, {Partition: 0, Recent: 4}, {Partition: 2, Recent: 1}}},
		// Past a minute: against the newest sample at least a minute old.
		{sample(61, 9, 3, 15, 12, 11, 20), 4, 1, []int64{5, 2, 1, 10}, []wire.PartitionHeat{{Partition: 3, Recent: 10}, {Partition: 0, Recent: 5}, {Partition: 1, Recent: 2}}},
		{sample(95, 9, 3, 15, 12, 11, 20), 2, 0, []int64{1, 2, 0, 0}, []wire.PartitionHeat{{Partition: 1, Recent: 2}, {Partition: 0, Recent: 1}}},
		// Totals that went down (a window retired) never give negatives.
		{sample(200, 9, 1, 0, 0, 0, 0), 0, 0, []int64{0, 0, 0, 0}, []wire.PartitionHeat{}},
	}
	var r recentTotals
	for i, s := range steps {
		var h wire.Health
		recentFigures(&h, s.cur, r.add(s.cur))
		if h.LateLastMinute != s.late || h.CorrectionsLastMinute != s.corr ||
			!reflect.DeepEqual(h.PartitionRecent, s.recent) || !reflect.DeepEqual(h.Hottest, s.hottest) {
			t.Errorf("step %d: late %d corr %d recent %v hottest %v; want %d %d %v %v", i,
				h.LateLastMinute, h.CorrectionsLastMinute, h.PartitionRecent, h.Hottest, s.late, s.corr, s.recent, s.hottest)
		}
	}
	if n := len(r.samples); n > 3 {
		t.Errorf("%d samples kept, want only the last minute's", n)
	}
}
