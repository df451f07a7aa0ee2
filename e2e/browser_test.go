package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/lease"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// TestBrowserDashboard drives the dashboard in headless chromium against an
// in-process pipeline and asserts on the rendered DOM: the page loads; a
// new event shows up without a reload within 2s; a correction is shown; a
// window reaching final changes its look (and a too-late event shows in
// late dropped); rejected records are counted by reason in the health
// panel; stopping the source shows the stale banner (and resuming
// clears it); the page keeps updating after the nats-server restarts.
// The steps share one pipeline and one browser tab and run in order.
func TestBrowserDashboard(t *testing.T) {
	chromium := browserChromium(t)
	began := time.Now()
	const staleAfter = 2 * time.Second
	rig := browserStartRig(t, staleAfter)
	b := browserStart(t, chromium)

	// Event times: three consecutive hours A, B, C ending well before now,
	// inside the chart's last 24 hours.
	h0 := time.Now().UTC().Truncate(time.Hour).Add(-6 * time.Hour)
	winA, winB, winC := window.ID(window.Ms(h0)), window.ID(window.Ms(h0.Add(time.Hour))), window.ID(window.Ms(h0.Add(2*time.Hour)))
	// current is the chart's last bar, the hour of now.
	current := func() string { return window.ID(window.Ms(time.Now())) }
	row := func(id string) string {
		return fmt.Sprintf(`document.querySelector('#windows-body tr[data-window-id=%q]')`, id)
	}
	bar := func(id string) string {
		return fmt.Sprintf(`document.querySelector('#chart g.bar[data-window-id=%q]')`, id)
	}
	rowHTML := func(id string) string { return fmt.Sprintf(`(%s||{outerHTML:'no row %s'}).outerHTML`, row(id), id) }
	count := func(id string, n int) string {
		return fmt.Sprintf(`(%s||{}).querySelector?.('.c-count')?.textContent === %q`, row(id), strconv.Itoa(n))
	}
	step := func(name string, f func(t *testing.T)) {
		if !t.Run(name, f) {
			t.FailNow() // the later steps build on this one
		}
	}

	step("page loads", func(t *testing.T) {
		b.navigate(rig.base + "/")
		b.waitFor(10*time.Second, "page ready", `document.body.dataset.ready === 'true' && document.getElementById('conn').dataset.state === 'live'`,
			`document.body.outerHTML.slice(0, 2000)`)
		if title := browserMust[string](b, `document.title`); title != "receiptflow — live receipt windows" {
			t.Errorf("title %q", title)
		}
		if n := browserMust[int](b, `document.querySelectorAll('#chart g.bar').length`); n != 24 {
			t.Errorf("chart has %d bars, want 24", n)
		}
		for _, id := range []string{"h-global-wm", "h-late", "h-corrections", "h-correction-backlog", "h-state", "h-hottest", "partitions", "backlog"} {
			if !browserMust[bool](b, fmt.Sprintf(`!!document.getElementById(%q)`, id)) {
				t.Errorf("health panel: no #%s", id)
			}
		}
		// The pipeline runs on static indices: the Owners row says so
		// instead of showing an empty table.
		b.waitFor(5*time.Second, "owners: static", `[...document.querySelectorAll('#h-owners .owners[data-mode="static"]')].length === 2`,
			`document.getElementById('h-owners').outerHTML`)
		if txt := browserMust[string](b, `document.getElementById('h-owners').textContent`); !strings.Contains(txt, "static indices (--instance/--instances), no leases") {
			t.Errorf("owners row %q", txt)
		}
		if nats := browserMust[string](b, `document.getElementById('nats').textContent`); nats != "NATS connected" {
			t.Errorf("NATS pill %q", nats)
		}
		// Marks this document: a reload would lose it.
		browserMust[bool](b, `(window.__sameDocument = true)`)
	})

	step("new event shows without reload within 2s", func(t *testing.T) {
		sent := time.Now()
		rig.send(h0.Add(10 * time.Minute))
		b.waitFor(2*time.Second-time.Since(sent), "first event of "+winA, count(winA, 1), rowHTML(winA))
		t.Logf("the event was on the page %s after the publish began", time.Since(sent).Round(time.Millisecond))
		if !browserMust[bool](b, `window.__sameDocument === true`) {
			t.Fatal("the page was reloaded")
		}
		// Open: provisional in the table and hatched in the chart.
		if cls := browserMust[string](b, row(winA)+`.className`); cls == "" || !strings.Contains(cls, "provisional") || strings.Contains(cls, "final") {
			t.Errorf("row %s class %q, want provisional", winA, cls)
		}
		if fill := browserMust[string](b, bar(winA)+`.querySelector('rect.body').getAttribute('fill')`); fill != "url(#hatch-provisional)" && fill != "url(#hatch-stale)" {
			t.Errorf("bar %s fill %q, want a hatched provisional bar", winA, fill)
		}
		// The current hour has no events and is not final: never a zero.
		if st := browserMust[string](b, bar(current())+`.dataset.state`); st != "no_data" {
			t.Errorf("current hour %s: state %q, want no_data", current(), st)
		}
	})

	step("correction is shown", func(t *testing.T) {
		// An event of B moves every watermark past A's end: A's first
		// hourly output (in_grace) ...
		rig.send(h0.Add(70 * time.Minute))
		b.waitFor(5*time.Second, winA+" in grace", row(winA)+`?.dataset.status === 'in_grace'`, rowHTML(winA))
		// ... then a late event of A within grace is a correction.
		rig.send(h0.Add(20 * time.Minute))
		b.waitFor(5*time.Second, winA+" corrected", count(winA, 2)+` && `+row(winA)+`.dataset.correctedBy === '1'`, rowHTML(winA))
		if txt := browserMust[string](b, row(winA)+`.querySelector('.c-corr .badge.corrected').textContent`); txt != "corrected +1" {
			t.Errorf("correction badge %q, want %q", txt, "corrected +1")
		}
		if txt := browserMust[string](b, row(winA)+`.querySelector('.c-corr .detail').textContent`); !strings.Contains(txt, "first output 1") {
			t.Errorf("correction detail %q, want the first output's count", txt)
		}
		if txt := browserMust[string](b, bar(winA)+`.querySelector('text.corr')?.textContent || ''`); txt != "+1" {
			t.Errorf("chart correction marker %q, want +1", txt)
		}
	})

	step("window reaching final changes its look", func(t *testing.T) {
		look := func() string {
			return browserMust[string](b, fmt.Sprintf(`(() => { const r = %s, s = getComputedStyle(r), c = getComputedStyle(r.querySelector('.c-count'));
				return [r.dataset.final, s.borderLeftStyle, s.backgroundColor, c.color, %s.querySelector('rect.body').getAttribute('fill')].join('|'); })()`, row(winA), bar(winA)))
		}
		before := look()
		// An event past A's end + grace (+ lateness) makes A final.
		rig.send(h0.Add(2*time.Hour + 10*time.Minute))
		b.waitFor(5*time.Second, winA+" final", row(winA)+`?.dataset.final === 'true'`, rowHTML(winA))
		after := look()
		t.Logf("look of %s: provisional %s, final %s", winA, before, after)
		if before == after {
			t.Fatalf("the look of %s did not change on final: %s", winA, after)
		}
		if fill := browserMust[string](b, bar(winA)+`.querySelector('rect.body').getAttribute('fill')`); fill != "#1f5fd1" {
			t.Errorf("final bar fill %q, want solid", fill)
		}
		if txt := browserMust[string](b, row(winA)+`.querySelector('.c-status').textContent`); !strings.Contains(txt, "final") {
			t.Errorf("status cell %q", txt)
		}
		// B is in grace: it keeps the provisional look.
		if cls := browserMust[string](b, row(winB)+`.className + '|' + `+row(winB)+`.dataset.status`); !strings.Contains(cls, "provisional") || !strings.Contains(cls, "in_grace") {
			t.Errorf("row %s: %q, want provisional, in_grace", winB, cls)
		}
		// Hours before A (the source's first event) are final now, but they
		// are "no data", never a zero (docs/spec.md §3).
		before0 := window.ID(window.Ms(h0.Add(-time.Hour)))
		if st := browserMust[string](b, bar(before0)+`?.dataset.state`); st != "no_data" {
			t.Errorf("hour %s before the first event: state %q, want no_data", before0, st)
		}
		// A too-late event of A is not counted; it shows as late dropped.
		rig.send(h0.Add(30 * time.Minute))
		b.waitFor(5*time.Second, winA+" late dropped", row(winA)+`?.querySelector('.c-late').textContent === '1'`, rowHTML(winA))
		if !browserMust[bool](b, count(winA, 2)) {
			t.Errorf("a too-late event changed the count: %s", browserMust[string](b, rowHTML(winA)))
		}
		// The health panel shows the late event and the correction.
		b.waitFor(3*time.Second, "late event in the health panel", `document.getElementById('h-late').textContent.startsWith('1 / min') && document.getElementById('h-correction-backlog').textContent.startsWith('1 ') && document.getElementById('h-corrections').textContent.includes('1 counted as corrections')`,
			`document.querySelector('dl.kv').outerHTML`)
		b.screenshot("dashboard")
	})

	step("rejected records are counted by reason in the health panel", func(t *testing.T) {
		checkRejected(t, rig, b)
	})

	step("stopping the source shows the stale banner", func(t *testing.T) {
		// Nothing is sent from here on: after stale-after the banner shows.
		b.waitFor(staleAfter+5*time.Second, "stale banner", `!document.getElementById('stale-banner').hidden && getComputedStyle(document.getElementById('stale-banner')).display !== 'none'`,
			`document.getElementById('stale-banner').outerHTML`)
		reason := browserMust[string](b, `document.getElementById('stale-reason').textContent`)
		if !strings.Contains(reason, "sent nothing since") && !strings.Contains(reason, "has not reported") {
			t.Errorf("stale reason %q", reason)
		}
		b.waitFor(2*time.Second, "provisional windows marked stale", row(winC)+`?.dataset.stale === 'true' && !!`+row(winC)+`.querySelector('.badge.stale')`, rowHTML(winC))
		if st := browserMust[string](b, row(winA)+`.dataset.stale`); st != "false" {
			t.Errorf("final window %s marked stale=%s; a final window is never stale", winA, st)
		}
		if st := browserMust[string](b, fmt.Sprintf(`(g => g.dataset.state + '|' + [...g.querySelectorAll('text[class]')].map(t => t.textContent).join(','))(%s)`, bar(current()))); !strings.HasPrefix(st, "no_data|") || strings.Contains(st, "0") {
			t.Errorf("current hour while stale: %q, want no data shown as ?, never a zero", st)
		}
		if n := browserMust[int](b, `document.querySelectorAll('#chart g.bar.provisional[data-stale="true"]').length`); n == 0 {
			t.Errorf("no provisional bar marked stale")
		}
		b.screenshot("stale")
		// The source comes back: the banner goes away.
		rig.send(h0.Add(2*time.Hour + 30*time.Minute))
		b.waitFor(staleAfter+2*time.Second, "banner gone after the source resumed", `document.getElementById('stale-banner').hidden && `+count(winC, 2),
			`document.getElementById('stale-banner').outerHTML + `+rowHTML(winC)+` + '\n/api/health: ' + `+browserFetch("/api/health"))
	})

	step("keeps updating after the nats-server restarts", func(t *testing.T) {
		reloads := browserMust[int](b, `+document.getElementById('h-watch').dataset.reloads`)
		restarted := time.Now()
		rig.restartNATS()
		rig.send(h0.Add(2*time.Hour + 20*time.Minute))
		b.waitFor(15*time.Second, winC+" updated after the restart", count(winC, 3), rowHTML(winC))
		t.Logf("updated on the page %s after the restart began (service restarts: %v)", time.Since(restarted).Round(time.Millisecond), rig.p.Crashes())
		b.waitFor(5*time.Second, "a re-watch shown", fmt.Sprintf(`+document.getElementById('h-watch').dataset.reloads > %d`, reloads),
			`document.getElementById('h-watch').outerHTML`)
		b.waitFor(5*time.Second, "NATS connected", `document.getElementById('nats').dataset.state === 'connected'`, `document.getElementById('nats').outerHTML`)
		// The rejected tally is kept in the bucket: neither reset nor
		// counted again by the restart.
		b.waitFor(5*time.Second, "the rejected tally after the restart", rejectedShown("3", "2", "1"), `document.getElementById('h-rejected').outerHTML`)
		if !browserMust[bool](b, `window.__sameDocument === true`) {
			t.Fatal("the page was reloaded")
		}
		b.screenshot("after-restart")
	})

	step("an empty final hour after the first event is a confirmed zero", func(t *testing.T) {
		// An event of h0+5h leaves h0+3h without events and final (its end
		// plus grace is behind the watermark): a confirmed zero; the hours
		// before A stay "no data".
		empty := window.ID(window.Ms(h0.Add(3 * time.Hour)))
		rig.send(h0.Add(5*time.Hour + 10*time.Minute))
		b.waitFor(5*time.Second, empty+" confirmed zero", bar(empty)+`?.dataset.state === 'confirmed_zero'`, bar(empty)+`?.outerHTML`)
		before0 := window.ID(window.Ms(h0.Add(-time.Hour)))
		if st := browserMust[string](b, bar(before0)+`?.dataset.state`); st != "no_data" {
			t.Errorf("hour %s before the first event: state %q, want no_data", before0, st)
		}
	})

	step("the health panel shows the owner of each partition", func(t *testing.T) {
		// Two windower group members (lease.Join, as the daemon does)
		// share the 2 partitions; the page lists both owners.
		ctx, cancel := context.WithCancel(rig.ctx)
		defer cancel()
		for _, id := range []string{"member-a", "member-b"} {
			g, err := lease.Join(ctx, rig.p.Admin.JS, lease.Config{Bucket: wire.For("").LeaseBucket(), Kind: "windower", ID: id,
				Partitions: 2, TTL: 5 * time.Second, Info: "127.0.0.1:1"})
			if err != nil {
				t.Fatal(err)
			}
			go g.Run(ctx)
			go func() { // a service with nothing to drain
				for range g.Changed() {
					if ex := g.Excess(); len(ex) > 0 {
						_ = g.Release(ctx, ex...)
					}
				}
			}()
		}
		line := `document.querySelector('#h-owners .owners[data-kind="windower"]')`
		b.waitFor(15*time.Second, "both owners shown", line+`?.dataset.mode === 'group' && new Set([...`+line+`.querySelectorAll('.owner[data-member]')].map(e => e.dataset.member)).size === 2`,
			`document.getElementById('h-owners').outerHTML`)
		if txt := browserMust[string](b, line+`.textContent`); !strings.Contains(txt, "2 members") || !strings.Contains(txt, "p0 member-") || !strings.Contains(txt, "p1 member-") {
			t.Errorf("windower owners %q", txt)
		}
		if mode := browserMust[string](b, `document.querySelector('#h-owners .owners[data-kind="validator"]').dataset.mode`); mode != "no_member" {
			t.Errorf("validator owners mode %q, want no_member once the bucket was written", mode)
		}
	})

	if ex := b.messages("exception"); len(ex) > 0 {
		t.Errorf("uncaught exceptions in the page: %q", ex)
	}
	if errs := b.messages("error", "warning"); len(errs) > 0 {
		t.Logf("browser console: %q", errs)
	}
	t.Logf("browser suite took %s", time.Since(began).Round(time.Millisecond))
}
