package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/receiptflow/receiptflow/pkg/window"
)

// browserWindowsServed waits until the dashboard's /api/windows names
// every id.
func browserWindowsServed(t *testing.T, base string, ids ...string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(base + "/api/windows")
		body := ""
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
		}
		all := true
		for _, id := range ids {
			all = all && strings.Contains(body, `"window_id": "`+id+`"`)
		}
		if all {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/api/windows does not name %v within 20 s: %v\n%.1000s", ids, err, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestBrowserRendersBeforeTheStream (issue 14, papercut 6): behind a proxy
// that holds the event stream back, the page still shows the windows the
// dashboard holds, from /api/windows on load. Before, the page rendered
// only from the stream, and stayed at "waiting for data…".
func TestBrowserRendersBeforeTheStream(t *testing.T) {
	chromium := browserChromium(t)
	rig := browserStartRig(t, time.Minute)
	h0 := time.Now().UTC().Truncate(time.Hour).Add(-3 * time.Hour)
	rig.send(h0.Add(5 * time.Minute))
	rig.send(h0.Add(6 * time.Minute))
	id := window.ID(window.Ms(h0))
	browserWindowsServed(t, rig.base, id)

	target, _ := url.Parse(rig.base)
	proxy := httputil.NewSingleHostReverseProxy(target)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/events" {
			<-r.Context().Done() // a buffering proxy: nothing comes through
			return
		}
		proxy.ServeHTTP(w, r)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	b := browserStart(t, chromium)
	b.navigate("http://" + ln.Addr().String() + "/")
	row := fmt.Sprintf(`document.querySelector('#windows-body tr[data-window-id=%q]')`, id)
	b.waitFor(5*time.Second, "window row rendered without the stream",
		row+`?.querySelector('.c-count')?.textContent === '2' && document.body.dataset.ready === 'true'`,
		`document.getElementById('windows-body').outerHTML`)
	if n := browserMust[int](b, `document.querySelectorAll('#chart g.bar').length`); n != 24 {
		t.Errorf("chart has %d bars, want 24", n)
	}
	// Without the stream the page does not pass for live.
	b.waitFor(10*time.Second, "no-updates pill", `document.getElementById('conn').dataset.state === 'lost'`,
		`document.getElementById('conn').outerHTML`)
}

// TestBrowserPhone (issue 14, papercut 7): at 390 px wide the page shows
// the status of every window in the table, inside the screen, and every
// label of the chart is at least 11 px; the page does not scroll sideways.
// Before, the Status column fell off the right edge and the chart's labels
// were about 4.5 px (a 760-unit drawing shrunk to the phone's width).
func TestBrowserPhone(t *testing.T) {
	chromium := browserChromium(t)
	rig := browserStartRig(t, time.Minute)
	// A final window (its end + grace under the watermark), a corrected
	// one, and open ones.
	h0 := time.Now().UTC().Truncate(time.Hour).Add(-5 * time.Hour)
	rig.send(h0.Add(10 * time.Minute))
	rig.send(h0.Add(2*time.Hour + 10*time.Minute))
	rig.send(h0.Add(4*time.Hour + 5*time.Minute))
	rig.send(h0.Add(2*time.Hour + 20*time.Minute)) // after that window is final: LATE
	ids := []string{window.ID(window.Ms(h0)), window.ID(window.Ms(h0.Add(2 * time.Hour))), window.ID(window.Ms(h0.Add(4 * time.Hour)))}
	browserWindowsServed(t, rig.base, ids...)

	b := browserStart(t, chromium)
	if _, err := chromedp.Run(b.ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile, chromedp.EmulatePortrait)); err != nil {
		t.Fatal(err)
	}
	b.navigate(rig.base + "/")
	b.waitFor(10*time.Second, "page ready", `document.body.dataset.ready === 'true' && document.querySelectorAll('#windows-body tr[data-window-id]').length >= 3`,
		`document.body.outerHTML.slice(0, 2000)`)
	if w := browserMust[int](b, `window.innerWidth`); w != 390 {
		// A mobile browser widens the layout viewport to content that
		// does not fit (and zooms out): the page is not made for 390 px.
		t.Fatalf("the page lays out %d px wide on a 390 px screen, want 390", w)
	}
	type cell struct {
		ID, Text     string
		Left, Right  float64
		Width, Shown float64
	}
	statuses := browserMust[[]cell](b, `[...document.querySelectorAll('#windows-body tr[data-window-id]')].map((tr) => {
		const td = tr.querySelector('td.c-status'); const r = td.getBoundingClientRect();
		return { ID: tr.dataset.windowId, Text: td.textContent, Left: r.left, Right: r.right, Width: r.width,
			Shown: getComputedStyle(td).display === 'none' ? 0 : 1 };
	})`)
	if len(statuses) < 3 {
		t.Fatalf("%d windows in the table, want at least 3", len(statuses))
	}
	for _, c := range statuses {
		if c.Shown == 0 || c.Width <= 0 || c.Left < 0 || c.Right > 390 || !(strings.Contains(c.Text, "final") || strings.Contains(c.Text, "provisional")) {
			t.Errorf("window %s: status %q at %.0f..%.0f px (shown %v), want it inside 0..390", c.ID, c.Text, c.Left, c.Right, c.Shown == 1)
		}
	}
	if !slicesContainsFinal(statuses) {
		t.Errorf("no final window among %+v", statuses)
	}
	type label struct {
		Text string
		Px   float64
	}
	labels := browserMust[[]label](b, `(() => {
		const svg = document.getElementById('chart');
		const scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
		return [...svg.querySelectorAll('text')].filter((t) => t.textContent.trim() !== '').map((t) =>
			({ Text: t.textContent, Px: parseFloat(getComputedStyle(t).fontSize) * scale }));
	})()`)
	if len(labels) < 10 {
		t.Fatalf("%d chart labels, want the axis, hours and counts", len(labels))
	}
	for _, l := range labels {
		if l.Px < 11 {
			t.Errorf("chart label %q is %.1f px, want at least 11", l.Text, l.Px)
		}
	}
	if sw := browserMust[int](b, `document.documentElement.scrollWidth`); sw > 390 {
		t.Errorf("the page is %d px wide at a 390 px viewport: it scrolls sideways", sw)
	}
	b.screenshot("phone-390")
}

func slicesContainsFinal[T any](cells []T) bool {
	for _, c := range cells {
		if strings.Contains(fmt.Sprintf("%+v", c), "✓ final") {
			return true
		}
	}
	return false
}
