package dashboard

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

var t0 = time.Date(2026, 12, 2, 10, 30, 0, 0, time.UTC)

func TestJudgeStale(t *testing.T) {
	fresh := &wire.Health{UpdatedAt: t0.Add(-time.Second), SourceLastSeen: t0.Add(-10 * time.Second), StaleAfter: "2m0s"}
	cases := []struct {
		name   string
		h      *wire.Health
		stale  bool
		reason string
	}{
		{"no report since the reader started", nil, true, "no health report from the publisher since this reader started at 2026-12-02 10:27:00Z"},
		{"fresh", fresh, false, ""},
		{"publisher silent", &wire.Health{UpdatedAt: t0.Add(-3 * time.Minute), SourceLastSeen: t0.Add(-3 * time.Minute)}, true, "publisher has not reported since 2026-12-02 10:27:00Z"},
		{"publisher says stale", &wire.Health{UpdatedAt: t0, Stale: true, StaleAfter: "2m0s", SourceLastSeen: t0.Add(-5 * time.Minute)}, true, "source has sent nothing since 2026-12-02 10:25:00Z (stale after 2m0s)"},
		{"reader's own threshold", &wire.Health{UpdatedAt: t0, SourceLastSeen: t0.Add(-150 * time.Second)}, true, "stale after 2m0s"},
		{"nothing ever sent, publisher not yet stale", &wire.Health{UpdatedAt: t0}, false, ""},
		{"nothing ever sent, publisher stale", &wire.Health{UpdatedAt: t0, Stale: true, StaleAfter: "2m0s"}, true, "since the start (no message yet)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			stale, reason := judgeStale(c.h, t0, t0.Add(-3*time.Minute), 2*time.Minute)
			if stale != c.stale || !strings.Contains(reason, c.reason) {
				t.Fatalf("judgeStale = %v, %q; want %v, containing %q", stale, reason, c.stale, c.reason)
			}
		})
	}
}

// TestNoReportYetIsStartingNotStale: a reader that started a moment ago
// and has no health report yet sees a fresh deployment starting, not stale
// data; after StaleAfter without one it is stale.
func TestNoReportYetIsStartingNotStale(t *testing.T) {
	for _, c := range []struct {
		since           time.Duration
		stale, starting bool
	}{
		{time.Second, false, true},
		{119 * time.Second, false, true},
		{2 * time.Minute, true, false},
	} {
		started := t0.Add(-c.since)
		stale, reason := judgeStale(nil, t0, started, 2*time.Minute)
		starting := isStarting(nil, t0, started, 2*time.Minute)
		if stale != c.stale || starting != c.starting {
			t.Errorf("%s after start: stale %v (%q) starting %v; want stale %v starting %v", c.since, stale, reason, starting, c.stale, c.starting)
		}
	}
	if isStarting(&wire.Health{UpdatedAt: t0}, t0, t0, 2*time.Minute) {
		t.Error("starting with a report")
	}
}

func snap(id string, count, version int64, status window.Status) wire.Window {
	start, _ := window.ParseID(id)
	return wire.Window{WindowID: id, Start: window.Time(start), End: window.Time(start + window.WidthMs),
		Count: count, Version: version, Status: status}
}

func TestHoursNeverShowAZeroThatIsNotFinal(t *testing.T) {
	// Global watermark 10:25 with 1h grace: hours ending at or before
	// 09:25 are final (08:00 and earlier), 09:00 is in grace, 10:00 open.
	h := &wire.Health{GlobalWatermark: t0.Add(-5 * time.Minute), Grace: "1h0m0s", UpdatedAt: t0}
	windows := map[string]WindowView{}
	for _, w := range []wire.Window{
		snap("2026-12-02T07", 5, 3, window.StatusFinal),
		snap("2026-12-02T09", 2, 2, window.StatusInGrace),
	} {
		windows[w.WindowID] = windowView(w, false, nil)
	}
	ids := []string{"2026-12-02T09", "2026-12-02T07"}
	cases := []struct {
		name      string
		stale     bool
		wantState map[string]string
		wantStale map[string]bool
	}{
		{"fresh", false,
			map[string]string{"2026-12-02T10": HourNoData, "2026-12-02T09": HourProvisional, "2026-12-02T08": HourConfirmedZero, "2026-12-02T07": HourFinal, "2026-12-02T06": HourNoData, "2026-12-01T11": HourNoData},
			map[string]bool{"2026-12-02T10": false, "2026-12-02T09": false, "2026-12-02T08": false}},
		{"stale", true,
			map[string]string{"2026-12-02T10": HourNoData, "2026-12-02T08": HourConfirmedZero},
			map[string]bool{"2026-12-02T10": true, "2026-12-02T08": false}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := hours(windows, ids, h, c.stale, t0, time.Time{})
			if len(got) != ChartHours || got[ChartHours-1].WindowID != "2026-12-02T10" || got[0].WindowID != "2026-12-01T11" {
				t.Fatalf("hours span %s..%s (%d), want the 24 hours ending 2026-12-02T10", got[0].WindowID, got[len(got)-1].WindowID, len(got))
			}
			for _, hv := range got {
				if want, ok := c.wantState[hv.WindowID]; ok && hv.State != want {
					t.Errorf("%s: state %s, want %s", hv.WindowID, hv.State, want)
				}
				if want, ok := c.wantStale[hv.WindowID]; ok && hv.Stale != want {
					t.Errorf("%s: stale %v, want %v", hv.WindowID, hv.Stale, want)
				}
				if hv.State == HourConfirmedZero && hv.Status != window.StatusFinal {
					t.Errorf("%s: confirmed zero with status %q", hv.WindowID, hv.Status)
				}
			}
		})
	}
	// Without a health report nothing is known to be final: no zeros.
	for _, hv := range hours(map[string]WindowView{}, nil, nil, true, t0, time.Time{}) {
		if hv.State != HourNoData || !hv.Stale {
			t.Fatalf("%s without health: state %s stale %v, want no_data, stale", hv.WindowID, hv.State, hv.Stale)
		}
	}
}

func TestHoursFollowOldData(t *testing.T) {
	// A replay of last year's data: the chart ends at its newest window.
	w := snap("2025-03-01T05", 1, 3, window.StatusFinal)
	firstW := snap("2025-02-28T10", 2, 3, window.StatusFinal)
	byID := map[string]WindowView{w.WindowID: windowView(w, false, nil), firstW.WindowID: windowView(firstW, false, nil)}
	got := hours(byID, []string{w.WindowID, firstW.WindowID},
		&wire.Health{GlobalWatermark: window.Time(window.EndOfStream), Grace: "1h0m0s"}, false, t0, time.Time{})
	if last := got[len(got)-1]; last.WindowID != w.WindowID || last.State != HourFinal {
		t.Fatalf("last bar %+v, want %s final", last, w.WindowID)
	}
	if got[0].WindowID != "2025-02-28T06" || got[0].State != HourNoData {
		t.Fatalf("first bar %+v, want 2025-02-28T06 no data (before the first event)", got[0])
	}
	for _, hv := range got {
		if hv.WindowID == "2025-02-28T11" && hv.State != HourConfirmedZero {
			t.Fatalf("bar %+v, want a confirmed zero (after the first event; end of stream closes every window)", hv)
		}
	}
}

func TestWindowView(t *testing.T) {
	corrected := snap("2026-12-02T08", 12, 6, window.StatusInGrace)
	corrected.Corrections, corrected.FirstOutputVersion = 2, 4
	cases := []struct {
		name      string
		w         wire.Window
		staleNow  bool
		first     map[string]int64
		final     bool
		stale     bool
		corrected int64
	}{
		{"open fresh", snap("2026-12-02T10", 3, 1, window.StatusOpen), false, nil, false, false, 0},
		{"open, stale now", snap("2026-12-02T10", 3, 1, window.StatusOpen), true, nil, false, true, 0},
		{"final is never stale", snap("2026-12-02T07", 3, 3, window.StatusFinal), true, nil, true, false, 0},
		{"published stale", func() wire.Window { w := snap("2026-12-02T10", 3, 1, window.StatusOpen); w.Stale = true; return w }(), false, nil, false, true, 0},
		{"corrected, first output unseen", corrected, false, nil, false, false, 2},
		{"corrected, first output seen", corrected, false, map[string]int64{"2026-12-02T08": 11}, false, false, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := windowView(c.w, c.staleNow, c.first)
			if v.Final != c.final || v.Stale != c.stale || v.CorrectedBy != c.corrected {
				t.Fatalf("final %v stale %v corrected_by %d; want %v %v %d", v.Final, v.Stale, v.CorrectedBy, c.final, c.stale, c.corrected)
			}
		})
	}
}

// TestHoursBeforeTheFirstEventAreNoData: docs/spec.md §3, a final hour without
// events is a confirmed zero only from the hour of the source's first event
// on; the final hours before it are "no data". With no window at all (only
// heartbeats so far) every hour is "no data", however final.
func TestHoursBeforeTheFirstEventAreNoData(t *testing.T) {
	// Global watermark 10:25, grace 1h: every hour up to 08:00 is final.
	h := &wire.Health{GlobalWatermark: t0.Add(-5 * time.Minute), Grace: "1h0m0s", UpdatedAt: t0}
	first := snap("2026-12-02T05", 4, 3, window.StatusFinal)
	byID := map[string]WindowView{first.WindowID: windowView(first, false, nil)}
	got := hours(byID, []string{first.WindowID}, h, false, t0, time.Time{})
	for _, hv := range got {
		want := HourNoData
		switch {
		case hv.WindowID == first.WindowID:
			want = HourFinal
		case hv.Start.After(window.Time(mustStart(t, first.WindowID))) && hv.Start.Before(t0.Add(-2*time.Hour)):
			want = HourConfirmedZero // 06:00, 07:00, 08:00
		case hv.Start.After(window.Time(mustStart(t, first.WindowID))):
			want = HourNoData // 09:00 in grace, 10:00 open
		}
		if hv.State != want {
			t.Errorf("%s: state %s, want %s", hv.WindowID, hv.State, want)
		}
	}
	for _, hv := range hours(map[string]WindowView{}, nil, h, false, t0, time.Time{}) {
		if hv.State != HourNoData {
			t.Errorf("no window yet: %s is %s, want %s", hv.WindowID, hv.State, HourNoData)
		}
	}
}

func mustStart(t *testing.T, id string) int64 {
	t.Helper()
	ms, err := window.ParseID(id)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// TestPageViewCarriesTopStores: the page's view keeps the first
// PageStores stores of a window and sums the others into other_stores
// (totals unchanged); a window with fewer keeps them all.
func TestPageViewCarriesTopStores(t *testing.T) {
	by := map[string]wire.StoreTotal{}
	for i := 0; i < 8; i++ {
		by[fmt.Sprintf("s%d", i)] = wire.StoreTotal{Count: int64(10 - i), AmountCents: int64(100 * i), Unpriced: int64(i % 2)}
	}
	big := wire.NewBreakdown(by)
	small := wire.NewBreakdown(map[string]wire.StoreTotal{"a": {Count: 2}})
	v := View{Windows: []WindowView{{WindowID: "w1", Count: 52, Breakdown: big}, {WindowID: "w2", Count: 2, Breakdown: small}}}
	got := withTopStores(v, PageStores)
	b := got.Windows[0].Breakdown
	if len(b.ByStore) != PageStores || b.ByStore[0].Store != "s0" || b.ByStore[4].Store != "s4" {
		t.Fatalf("stores kept: %+v", b.ByStore)
	}
	if b.OtherStores != (wire.StoreTotal{Count: 5 + 4 + 3, AmountCents: 500 + 600 + 700, Unpriced: 1 + 0 + 1}) {
		t.Fatalf("other stores %+v", b.OtherStores)
	}
	if b.StoreCount != 8 || b.AmountCents != big.AmountCents || b.Unpriced != big.Unpriced {
		t.Fatalf("totals changed: %+v", b)
	}
	if len(v.Windows[0].ByStore) != 8 {
		t.Fatal("the view it was given was changed")
	}
	if !reflect.DeepEqual(got.Windows[1].Breakdown, small) {
		t.Fatalf("a small breakdown changed: %+v", got.Windows[1].Breakdown)
	}
}
