package dashboard

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// TestWindowsPageBackInTime: /api/windows?before=ID&limit=N lists the N
// windows older than ID, newest first, says whether older ones remain,
// and ends its chart with the newest of them; the live view is unchanged
// by the paging (its newest windows, "older" when more are held); a
// pruned (purged) window disappears from every page; a bad before or
// limit is a 400.
func TestWindowsPageBackInTime(t *testing.T) {
	_, url := testenv.NATS(t)
	f := start(t, url, Config{Generation: "1", StaleAfter: time.Minute, Recent: 5})
	kv := f.bucket("1")
	t0 := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	for h := 0; h < 30; h++ {
		at := t0.Add(time.Duration(h) * time.Hour)
		f.putWindow(kv, wire.Window{WindowID: window.ID(window.Ms(at)), Start: at, End: at.Add(time.Hour),
			Count: int64(h + 1), Version: 2, Status: window.StatusFinal})
	}
	f.putHealth(kv, t0.Add(30*time.Hour))
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if v := f.windows(); v.TotalWindows != 30 {
			return errString("not loaded")
		}
		return nil
	})
	var live View
	f.getJSON("/api/windows?recent=5", &live)
	if len(live.Windows) != 5 || live.Windows[0].WindowID != "2026-11-29T05" || !live.Older || live.Before != "" {
		t.Fatalf("live: %d windows from %s, older %v, before %q", len(live.Windows), live.Windows[0].WindowID, live.Older, live.Before)
	}
	var page View
	f.getJSON("/api/windows?before=2026-11-29T01&limit=4", &page)
	ids := []string{}
	for _, w := range page.Windows {
		ids = append(ids, w.WindowID)
	}
	if len(ids) != 4 || ids[0] != "2026-11-29T00" || ids[3] != "2026-11-28T21" || !page.Older || page.Before != "2026-11-29T01" {
		t.Fatalf("page: %v older %v before %q", ids, page.Older, page.Before)
	}
	if last := page.Hours[len(page.Hours)-1]; last.WindowID != "2026-11-29T00" || last.Count != 25 {
		t.Fatalf("page chart ends with %+v, want 2026-11-29T00", last)
	}
	f.getJSON("/api/windows?before=2026-11-28T03", &page) // limit: the page size
	if len(page.Windows) != 3 || page.Older || page.Windows[2].WindowID != "2026-11-28T00" {
		t.Fatalf("oldest page: %+v older %v", page.Windows, page.Older)
	}
	if err := kv.Purge(context.Background(), wire.WindowKey("2026-11-28T01")); err != nil {
		t.Fatal(err)
	}
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		f.getJSON("/api/windows?before=2026-11-28T03", &page)
		if len(page.Windows) != 2 {
			return errString("purged window still listed")
		}
		return nil
	})
	for _, q := range []string{"?before=yesterday", "?before=2026-11-28", "?before=2026-11-28T03&limit=-1", "?limit=x"} {
		resp, err := http.Get(f.base + "/api/windows" + q)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %s, want 400", q, resp.Status)
		}
	}
}

type errString string

func (e errString) Error() string { return string(e) }
