package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/receiptflow/receiptflow/pkg/history"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// browserDaysAgree is a JavaScript condition: the page's Local days card
// shows zone's local days of windows as a reference computed here does,
// by time.In alone: one row per local date with a window, its count the
// sum of the windows starting on that date, its hours the UTC hours whose
// local date it is (23, 24 or 25).
func browserDaysAgree(b *browser, zone string, windows []wire.Window) string {
	b.t.Helper()
	loc, err := history.LoadZone(zone)
	if err != nil {
		b.t.Fatal(err)
	}
	type day struct {
		Hours int   `json:"hours"`
		Count int64 `json:"count"`
	}
	want := map[string]*day{}
	for _, w := range windows {
		d := w.Start.In(loc).Format("2006-01-02")
		if want[d] == nil {
			want[d] = &day{}
			midnight, _ := time.Parse("2006-01-02", d)
			for s := midnight.Add(-16 * time.Hour); s.Before(midnight.Add(40 * time.Hour)); s = s.Add(time.Hour) {
				if s.In(loc).Format("2006-01-02") == d {
					want[d].Hours++
				}
			}
		}
		want[d].Count += w.Count
	}
	js, _ := json.Marshal(want)
	return `(() => { const want = ` + string(js) + `; const t = document.getElementById('days');
		const r = [...document.querySelectorAll('#days-body tr[data-day]')];
		return t.dataset.zone === '` + zone + `' && r.length === Object.keys(want).length &&
			r.every((tr) => want[tr.dataset.day] && +tr.dataset.hours === want[tr.dataset.day].hours && +tr.dataset.count === want[tr.dataset.day].count); })()`
}

// browserDaysDescribe describes the Local days card for a failure report.
const browserDaysDescribe = `document.getElementById('days').dataset.zone + ': ' + [...document.querySelectorAll('#days-body tr')].map((tr) => tr.dataset.day + ' ' + tr.dataset.hours + 'h ' + tr.dataset.count + ' ' + tr.dataset.status + ' | ' + tr.textContent).join('; ')`

// elementShot saves a PNG of the element sel as artifacts/browser-<name>.png
// (smaller than a full page, for the docs).
func (b *browser) elementShot(name, sel string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS(sel)))
	if err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return
	}
	path := filepath.Join(browserArtifacts, "browser-"+name+".png")
	if err := os.MkdirAll(browserArtifacts, 0o755); err == nil {
		if err := os.WriteFile(path, png, 0o644); err != nil {
			b.t.Logf("screenshot %s: %v", name, err)
			return
		}
	}
	b.t.Logf("screenshot: e2e/%s", path)
}
