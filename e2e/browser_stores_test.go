package e2e

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/dashboard"
	"github.com/receiptflow/receiptflow/pkg/testenv"
)

// TestBrowserTopStores (issue 14, breakdowns): the page's "Top stores"
// card shows the newest window's stores with their submissions, share,
// amounts and unpriced submissions, and a click on another window's row
// shows that window's; /api/windows carries the same breakdown.
func TestBrowserTopStores(t *testing.T) {
	chromium := browserChromium(t)
	rig := browserStartRig(t, time.Minute)
	now := time.Now().UTC()
	older := now.Truncate(time.Hour).Add(-2 * time.Hour).Add(10 * time.Minute)
	// Two hours ago: store-x three times (12.50 and one unpriced), store-y
	// once (5.00); this hour: store-z twice (1.00 each).
	rig.sendStore(older, "store-x", map[string]any{"amount_cents": 1000})
	rig.sendStore(older.Add(time.Minute), "store-y", map[string]any{"amount_cents": 500})
	rig.sendStore(older.Add(2*time.Minute), "store-x", map[string]any{"amount_cents": 250})
	rig.sendStore(older.Add(3*time.Minute), "store-x", map[string]any{"note": "no amount"})
	// Both store-z events fall in the hour the test starts in, also in
	// its first minute (a run at 00:00:22 once put one in 23:00).
	zFirst := now.Add(-time.Minute)
	if hour := now.Truncate(time.Hour); zFirst.Before(hour) {
		zFirst = hour
	}
	rig.sendStore(zFirst, "store-z", map[string]any{"amount_cents": 100})
	rig.sendStore(now, "store-z", map[string]any{"amount_cents": 100.0})
	olderID := older.Format("2006-01-02T15")

	var v dashboard.View
	testenv.CheckFor(t, 20*time.Second, 100*time.Millisecond, func() error {
		v = dashboard.View{}
		resp, err := http.Get(rig.base + "/api/windows")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
			return err
		}
		for _, w := range v.Windows {
			if w.WindowID == olderID && w.Count == 4 {
				return nil
			}
		}
		return errNotYet("window " + olderID + " has not counted 4 yet")
	})
	for _, w := range v.Windows {
		if w.WindowID != olderID {
			continue
		}
		if w.StoreCount != 2 || w.AmountCents != 1750 || w.Unpriced != 1 || len(w.ByStore) != 2 ||
			w.ByStore[0].Store != "store-x" || w.ByStore[0].Count != 3 || w.ByStore[0].AmountCents != 1250 || w.ByStore[0].Unpriced != 1 ||
			w.ByStore[1].Store != "store-y" || w.ByStore[1].Count != 1 || w.ByStore[1].AmountCents != 500 {
			t.Fatalf("/api/windows breakdown of %s: %+v", olderID, w.Breakdown)
		}
	}

	b := browserStart(t, chromium)
	b.navigate(rig.base + "/")
	rows := `Array.from(document.querySelectorAll('#stores tbody tr')).map((tr) => Array.from(tr.cells).map((c) => c.textContent).join('|')).join('\n')`
	b.waitFor(10*time.Second, "the newest window's stores",
		`(document.getElementById('stores-window').textContent.includes('newest with data')) && `+rows+` === 'store-z|2|100%|2.00|0'`,
		`document.getElementById('stores-window').textContent + '\n' + `+rows)
	// Pick the older window in the table.
	if _, err := browserEval[bool](b, `(document.querySelector('#windows-body tr[data-window-id="`+olderID+`"]').click(), true)`); err != nil {
		t.Fatal(err)
	}
	b.waitFor(5*time.Second, "the picked window's stores",
		`document.getElementById('stores-window').textContent === 'window `+olderID+` (picked)' && `+rows+` === 'store-x|3|75%|12.50|1\nstore-y|1|25%|5.00|0'`,
		`document.getElementById('stores-window').textContent + '\n' + `+rows)
	total := browserMust[string](b, `document.getElementById('stores-total').textContent`)
	if want := "Window total 17.50 over 2 stores; 1 submission without an amount. Click a window to see its stores."; total != want {
		t.Errorf("stores total %q, want %q", total, want)
	}
	if picked := browserMust[bool](b, `document.querySelector('#windows-body tr[data-window-id="`+olderID+`"]').classList.contains('picked')`); !picked {
		t.Error("the picked window's row is not marked")
	}
	// The pick survives live updates: a new event redraws the page.
	rig.sendStore(now, "store-z", map[string]any{"amount_cents": 5})
	b.waitFor(10*time.Second, "a live update", `(document.querySelector('#windows-body tr:first-child .c-count')?.textContent) === '3'`,
		`document.getElementById('windows-body').outerHTML.slice(0, 1500)`)
	if got := browserMust[string](b, `document.getElementById('stores-window').textContent`); got != "window "+olderID+" (picked)" {
		t.Errorf("after a live update the card shows %q", got)
	}
	b.screenshot("top-stores")
	if msgs := b.messages("error", "exception"); len(msgs) > 0 {
		t.Errorf("console errors: %v", msgs)
	}
}
