package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/receiptflow/receiptflow/pkg/dashboard"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// papercutPage fills a bucket with windows and health, starts a dashboard
// (stale after staleAfter) over it and opens its page in chromium, ready
// once the table lists every window.
func papercutPage(t *testing.T, staleAfter time.Duration, windows []wire.Window, h wire.Health) *browser {
	t.Helper()
	path := browserChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	_, url := testenv.NATS(t)
	js := testenv.JetStream(t, url)
	if err := stream.Ensure(ctx, js, wire.For(""), stream.Config{Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, wire.For("").Bucket())
	if err != nil {
		t.Fatal(err)
	}
	put := func(key string, v any) {
		t.Helper()
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, key, b); err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range windows {
		put(wire.WindowKey(w.WindowID), w)
	}
	put(wire.HealthKey, h)
	_, base := startDashboard(t, ctx, url, dashboard.Config{StaleAfter: staleAfter})
	b := browserStart(t, path)
	b.navigate(base + "/")
	b.waitFor(15*time.Second, "every window listed", `document.querySelectorAll('#windows-body tr[data-window-id]').length === `+itoaJS(len(windows))+
		` && document.getElementById('h-state').textContent !== '–'`, `document.querySelector('main').innerText.slice(0, 2000)`)
	return b
}

func itoaJS(n int) string { b, _ := json.Marshal(n); return string(b) }

// finalWindow is a final window of hour at with count events.
func finalWindow(at time.Time, count int64) wire.Window {
	return wire.Window{WindowID: window.ID(window.Ms(at)), Start: at, End: at.Add(time.Hour), Count: count, Version: 2,
		FirstOutputVersion: 1, Status: window.StatusFinal, Watermark: at.Add(3 * time.Hour), UpdatedAt: at.Add(2 * time.Hour)}
}

// TestBrowserCountsOfOne (issue 26): a count of one names its noun in
// the singular: "1 late event awaiting…", "1 ledger entry", "1 window".
// The page said "1 late events awaiting offline recomputation".
func TestBrowserCountsOfOne(t *testing.T) {
	now := time.Now().UTC()
	at := now.Truncate(time.Hour).Add(-3 * time.Hour)
	b := papercutPage(t, 10*time.Minute, []wire.Window{finalWindow(at, 1)}, wire.Health{
		UpdatedAt: now, SourceLastSeen: now, StaleAfter: "10m0s", Grace: "1h0m0s", GlobalWatermark: now.Add(-5 * time.Minute),
		Watermarks: []time.Time{now, now}, CorrectionBacklog: 1, LedgerEntries: 1, Windows: 1,
	})
	for _, c := range []struct{ id, want string }{
		{"h-correction-backlog", "1 late event awaiting offline recomputation"},
		{"h-state", "1 ledger entry · 1 window"},
		{"window-count", "1 window"},
	} {
		got := browserMust[string](b, `document.getElementById('`+c.id+`').textContent`)
		if !strings.Contains(got, c.want) || (c.id == "window-count" && got != c.want) {
			t.Errorf("#%s: %q, want %q", c.id, got, c.want)
		}
	}
}

// TestBrowserOneTimeFormat (issue 26): the STALE banner's reason and the
// health panel write an instant the same way. The banner wrote
// 2026-12-05T05:41:57Z, the panel 2026-12-05 05:41:57Z.
func TestBrowserOneTimeFormat(t *testing.T) {
	now := time.Now().UTC()
	at := now.Truncate(time.Hour).Add(-3 * time.Hour)
	reported := now.Add(-20 * time.Minute).Truncate(time.Second) // the publisher is silent: STALE
	b := papercutPage(t, 10*time.Minute, []wire.Window{finalWindow(at, 4)}, wire.Health{
		UpdatedAt: reported, SourceLastSeen: reported, StaleAfter: "10m0s", Grace: "1h0m0s", GlobalWatermark: reported,
		Watermarks: []time.Time{reported, reported},
	})
	b.waitFor(10*time.Second, "the STALE banner", `!document.getElementById('stale-banner').hidden`, `document.getElementById('stale-banner').outerHTML`)
	want := reported.Format(dashboard.TimeLayout)
	banner := browserMust[string](b, `document.getElementById('stale-reason').textContent`)
	panel := browserMust[string](b, `document.getElementById('h-report').textContent`)
	if !strings.Contains(banner, want) || !strings.HasPrefix(panel, want) {
		t.Errorf("banner %q and panel %q, want both to write %q", banner, panel, want)
	}
}

// TestBrowserStateSizeSaysWhatItCounts (issue 26): the health panel's
// state size says that it counts window partials (one per window and
// partition), not the windows of the table. It said "30 windows held"
// beside 5 windows in the table.
func TestBrowserStateSizeSaysWhatItCounts(t *testing.T) {
	now := time.Now().UTC()
	base := now.Truncate(time.Hour).Add(-8 * time.Hour)
	var ws []wire.Window
	for i := range 5 {
		ws = append(ws, finalWindow(base.Add(time.Duration(i)*time.Hour), 10))
	}
	b := papercutPage(t, 10*time.Minute, ws, wire.Health{
		UpdatedAt: now, SourceLastSeen: now, StaleAfter: "10m0s", Grace: "1h0m0s", GlobalWatermark: now.Add(-5 * time.Minute),
		Watermarks: []time.Time{now, now}, LedgerEntries: 50, Windows: 30,
	})
	got := browserMust[string](b, `document.getElementById('h-state').textContent`)
	if !strings.Contains(got, "30 window partials in Redis") || !strings.Contains(got, "one per window and partition") {
		t.Errorf("#h-state %q: does not say what the 30 counts", got)
	}
	if strings.Contains(got, "windows held") {
		t.Errorf("#h-state %q: 30 \"windows\" beside 5 in the table", got)
	}
}

// liveHour is the open window of the current hour with count events.
func liveHour(now time.Time, count int64) wire.Window {
	w := finalWindow(now.Truncate(time.Hour), count)
	w.Status, w.Watermark = window.StatusOpen, now.Add(-5*time.Minute)
	return w
}

// TestBrowserChartScalesOnFinalWindows (issue 26): the chart's scale
// follows the final windows, and a live hour taller than them is clipped
// with a mark. The chart rescaled as the live hour filled (300 → 800 →
// 1000), shrinking every final bar.
func TestBrowserChartScalesOnFinalWindows(t *testing.T) {
	now := time.Now().UTC()
	cur := now.Truncate(time.Hour)
	var ws []wire.Window
	for i := 6; i >= 2; i-- {
		ws = append(ws, finalWindow(cur.Add(-time.Duration(i)*time.Hour), 300))
	}
	ws = append(ws, liveHour(now, 1000))
	b := papercutPage(t, 10*time.Minute, ws, wire.Health{
		UpdatedAt: now, SourceLastSeen: now, StaleAfter: "10m0s", Grace: "1h0m0s", GlobalWatermark: now.Add(-5 * time.Minute),
		Watermarks: []time.Time{now, now},
	})
	live := `document.querySelector('#chart g.bar[data-window-id="` + window.ID(window.Ms(cur)) + `"]')`
	b.waitFor(10*time.Second, "the live bar", live+` !== null`, `document.getElementById('chart').outerHTML.slice(0, 3000)`)
	axis := browserMust[[]string](b, `[...document.querySelectorAll('#chart > text')].map((t) => t.textContent)`)
	if len(axis) < 3 || axis[2] != "300" {
		t.Errorf("y axis %v, want its top at 300, the final windows' scale", axis)
	}
	if clipped := browserMust[bool](b, live+`.dataset.clipped === 'true' && `+live+`.querySelector('path.clip-mark') !== null && `+
		live+`.querySelector('text.count').textContent === '1000↑'`); !clipped {
		t.Errorf("the live bar above the scale is not clipped with a mark: %s", browserMust[string](b, live+`.outerHTML`))
	}
}

// TestBrowserPhoneCorrectionOnItsOwnBar (issue 26): on a 390 px phone the
// +n of a corrected hour is written on that hour's own bar label, just
// above its bar. It sat at the chart's top, beside the current hour's
// label, so the open hour looked corrected.
func TestBrowserPhoneCorrectionOnItsOwnBar(t *testing.T) {
	now := time.Now().UTC()
	cur := now.Truncate(time.Hour)
	var ws []wire.Window
	for i := 8; i >= 2; i-- {
		ws = append(ws, finalWindow(cur.Add(-time.Duration(i)*time.Hour), 300))
	}
	corrected := finalWindow(cur.Add(-time.Hour), 150)
	corrected.Status, corrected.Corrections = window.StatusInGrace, 3
	ws = append(ws, corrected, liveHour(now, 120))
	b := papercutPage(t, 10*time.Minute, ws, wire.Health{
		UpdatedAt: now, SourceLastSeen: now, StaleAfter: "10m0s", Grace: "1h0m0s", GlobalWatermark: now.Add(-5 * time.Minute),
		Watermarks: []time.Time{now, now},
	})
	if _, err := chromedp.Run(b.ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile, chromedp.EmulatePortrait)); err != nil {
		t.Fatal(err)
	}
	bar := `document.querySelector('#chart g.bar[data-window-id="` + corrected.WindowID + `"]')`
	// The chart is redrawn for its new width (the page's resize handler).
	b.waitFor(10*time.Second, "the phone's chart", `document.getElementById('chart').viewBox.baseVal.width <= 390 && `+bar+` !== null`,
		`document.getElementById('chart').outerHTML.slice(0, 3000)`)
	type box struct{ Left, Right, Top, Bottom, BarLeft, BarRight, BarTop float64 }
	got := browserMust[box](b, `(() => {
		const g = `+bar+`;
		const mark = [...g.querySelectorAll('text, tspan')].filter((n) => n.textContent.trim() === '+3')[0];
		const r = mark.getBoundingClientRect(), body = g.querySelector('rect.body').getBoundingClientRect();
		return { Left: r.left, Right: r.right, Top: r.top, Bottom: r.bottom, BarLeft: body.left, BarRight: body.right, BarTop: body.top };
	})()`)
	if mid := (got.Left + got.Right) / 2; mid < got.BarLeft-2 || mid > got.BarRight+2 {
		t.Errorf("the +3 is centred at x %.0f, off its bar (%.0f..%.0f)", mid, got.BarLeft, got.BarRight)
	}
	if got.Bottom > got.BarTop+1 || got.Bottom < got.BarTop-60 {
		t.Errorf("the +3 ends at y %.0f, not just above its bar's top %.0f", got.Bottom, got.BarTop)
	}
	b.screenshot("phone-correction")
}
