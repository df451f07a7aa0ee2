package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/receiptflow/receiptflow/pkg/dashboard"
	"github.com/receiptflow/receiptflow/pkg/history"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// TestBrowserTimeZone (docs/spec.md §5.2): the page opened with
// ?tz=America/New_York labels every window of the hours around the Nov 1,
// 2026 fall-back exactly as Go's history.HourLabel does (the repeated
// 01:00 by its offset); the labelled selector, reached and changed with
// the keyboard, relabels the table and the chart and keeps the choice in
// the URL, which a reload restores; Europe/Berlin from the URL agrees
// with Go too; Asia/Kolkata is refused on the page, naming it, and the
// labels stay UTC. In each zone the Local days card shows the zone's
// local days as a reference computed here (New York's Nov 1: 25 hours).
func TestBrowserTimeZone(t *testing.T) {
	path := browserChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, url := testenv.NATS(t)
	js := testenv.JetStream(t, url)
	if err := stream.Ensure(ctx, js, wire.For(""), stream.Config{Partitions: 1}); err != nil {
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
	first, last := time.Date(2026, 10, 31, 20, 0, 0, 0, time.UTC), time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	wm := last.Add(3 * time.Hour)
	var starts []time.Time
	var windows []wire.Window
	for at := first; !at.After(last); at = at.Add(time.Hour) {
		id := window.ID(window.Ms(at))
		w := wire.Window{WindowID: id, Start: at, End: at.Add(time.Hour), Count: int64(10 + at.Hour()),
			Version: 2, FirstOutputVersion: 1, Status: window.StatusFinal, Watermark: wm, UpdatedAt: at}
		put(wire.WindowKey(id), w)
		starts = append(starts, at)
		windows = append(windows, w)
	}
	now := time.Now().UTC()
	put(wire.HealthKey, wire.Health{UpdatedAt: now, SourceLastSeen: now, StaleAfter: "10m0s", Grace: "1h0m0s",
		GlobalWatermark: wm, Watermarks: []time.Time{wm}})
	_, base := startDashboard(t, ctx, url, dashboard.Config{StaleAfter: 10 * time.Minute, Recent: 24})

	// want is Go's label of every window in zone, as a JavaScript object.
	want := func(zone string) string {
		loc, err := history.LoadZone(zone)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for _, s := range starts {
			m[window.ID(window.Ms(s))] = history.HourLabel(loc, s)
		}
		b, _ := json.Marshal(m)
		return string(b)
	}
	const rows = `[...document.querySelectorAll('#windows-body tr[data-window-id]')]`
	agree := func(zone string) string {
		return `(() => { const want = ` + want(zone) + `; const r = ` + rows + `;
			return document.getElementById('tz').value === '` + zone + `' && r.length === ` + itoa(len(starts)) + ` &&
				r.every((tr) => tr.querySelector('td.c-window').dataset.local === want[tr.dataset.windowId]); })()`
	}
	describe := `document.getElementById('tz').value + ' ' + location.search + ' ' + ` + rows + `.map((tr) => tr.dataset.windowId + '=' + tr.querySelector('td.c-window').dataset.local).join(', ') + ' | ' + document.getElementById('tz-refused').textContent`
	tzParam := `new URLSearchParams(location.search).get('tz')`

	b := browserStart(t, path)
	b.navigate(base + "/?tz=America/New_York")
	b.waitFor(15*time.Second, "New York labels as Go's", agree("America/New_York"), describe)
	// The repeated hour, shown by its offset, on the page itself.
	for id, label := range map[string]string{"2026-11-01T05": "2026-11-01 01:00 EDT (-04:00)", "2026-11-01T06": "2026-11-01 01:00 EST (-05:00)"} {
		if got := browserMust[string](b, `document.querySelector('tr[data-window-id="`+id+`"] td.c-window .local').textContent`); got != label {
			t.Errorf("%s shows %q, want %q", id, got, label)
		}
	}
	if got := browserMust[string](b, `document.querySelector('th.c-window').textContent`); got != "Window (America/New_York)" {
		t.Errorf("table header %q", got)
	}
	// The chart's bars are labelled in the zone too.
	if got := browserMust[string](b, `document.querySelector('#chart g.bar[data-window-id="2026-11-01T06"] title').textContent`); got[:len("2026-11-01T06 (2026-11-01 01:00 EST (-05:00))")] != "2026-11-01T06 (2026-11-01 01:00 EST (-05:00))" {
		t.Errorf("chart bar title %q", got)
	}
	// The local days of the zone (docs/spec.md §5.2): Nov 1 is 25 hours
	// long in New York, and not final (its hours after the data are not);
	// Oct 31 is final (its hours before the data are confirmed zeros).
	b.waitFor(10*time.Second, "New York local days", browserDaysAgree(b, "America/New_York", windows), browserDaysDescribe)
	if got := browserMust[string](b, `[...document.querySelectorAll('#days-body tr')].map((tr) => tr.dataset.day + ' ' + tr.dataset.hours + ' ' + tr.dataset.status + ' ' + tr.querySelector('.d-hours').textContent).join('|')`); got != "2026-11-01 25 open 25 clocks back|2026-10-31 24 final 24" {
		t.Errorf("New York days %q", got)
	}
	b.screenshot("zone")
	b.elementShot("days", "section.days-card")

	// The selector is labelled and reached with the keyboard: Tab from the
	// element before it, then the arrow key picks the next zone.
	if got := browserMust[string](b, `document.getElementById('tz').labels[0].textContent`); got != "Time zone" {
		t.Errorf("selector label %q", got)
	}
	next := browserMust[string](b, `(() => { const s = document.getElementById('tz'); return s.options[s.selectedIndex + 1].value; })()`)
	browserMust[bool](b, `document.activeElement && document.activeElement.blur(), true`)
	for i := 0; i < 10 && browserMust[string](b, `document.activeElement ? document.activeElement.id : ''`) != "tz"; i++ {
		if err := chromedp.Do(b.ctx, chromedp.KeyEvent(kb.Tab)); err != nil {
			t.Fatal(err)
		}
	}
	if got := browserMust[string](b, `document.activeElement.id`); got != "tz" {
		t.Fatalf("Tab never reached the selector (focus on %q)", got)
	}
	if err := chromedp.Do(b.ctx, chromedp.KeyEvent(kb.ArrowDown)); err != nil {
		t.Fatal(err)
	}
	b.waitFor(10*time.Second, "the next zone by keyboard, labels and URL", agree(next)+` && `+tzParam+` === '`+next+`'`, describe)
	b.waitFor(10*time.Second, "the next zone's local days", browserDaysAgree(b, next, windows), browserDaysDescribe)
	if got := browserMust[string](b, `[...document.querySelectorAll('#chart > text')].pop().textContent`); got != "2026-10-31 → 2026-11-01 ("+next+" hours)" {
		t.Errorf("chart dates %q", got)
	}

	// A reload restores the choice from the URL.
	b.navigate(browserMust[string](b, `location.href`))
	b.waitFor(15*time.Second, "the zone restored on reload", agree(next), describe)

	b.navigate(base + "/?tz=Europe/Berlin")
	b.waitFor(15*time.Second, "Berlin labels as Go's", agree("Europe/Berlin"), describe)
	b.waitFor(10*time.Second, "Berlin local days", browserDaysAgree(b, "Europe/Berlin", windows), browserDaysDescribe)

	if errs := b.messages("exception", "error"); len(errs) > 0 {
		t.Errorf("console errors: %v", errs)
	}

	// A zone with a half-hour offset is refused by name (the 400 of
	// /api/zone is the only console error); labels stay UTC.
	b.navigate(base + "/?tz=Asia/Kolkata")
	b.waitFor(15*time.Second, "Kolkata refused", `!document.getElementById('tz-refused').hidden && document.getElementById('tz-refused').textContent.includes('Asia/Kolkata') && `+
		rows+`.length > 0 && `+rows+`.every((tr) => tr.querySelector('td.c-window').dataset.local.endsWith(':00 UTC'))`, describe)
	b.waitFor(10*time.Second, "UTC local days while Kolkata is refused", browserDaysAgree(b, "UTC", windows), browserDaysDescribe)
	if errs := b.messages("exception", "error"); len(errs) != 1 || !strings.Contains(errs[0], "status of 400") {
		t.Errorf("console errors: %v", errs)
	}
}
