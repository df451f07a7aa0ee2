package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/receiptflow/receiptflow/pkg/auth"
	"github.com/receiptflow/receiptflow/pkg/dashboard"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/window"
)

// browserReaders writes a dashboard tokens file admitting name:token pairs.
func browserReaders(t *testing.T, path string, pairs ...string) {
	t.Helper()
	var b strings.Builder
	for _, p := range pairs {
		name, token, _ := strings.Cut(p, ":")
		fmt.Fprintf(&b, "%s:%s\n", name, auth.HashToken(token))
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

// browserTypeToken types token into the page's token form and presses
// Enter, as a reader does.
func browserTypeToken(b *browser, token string) {
	b.t.Helper()
	browserMust[bool](b, `(() => { document.getElementById('auth-token').focus(); return true; })()`)
	if err := chromedp.Do(b.ctx, chromedp.KeyEvent(token), chromedp.KeyEvent(kb.Enter)); err != nil {
		b.t.Fatalf("type the token: %v", err)
	}
}

// TestBrowserAsksForTheReadersToken (the front door, point 4): a
// dashboard with readers' tokens shows the page's token form and nothing
// of its data; a wrong token is refused with a message and the form asks
// again; the right one shows the windows, live (the event stream is
// admitted by the session cookie, which the page's script cannot read),
// and is kept for the tab: a reload asks no more. Revoking the token (its
// line removed) brings the form back with the message that it was
// refused; another reader's token goes on, and Forget token asks again.
func TestBrowserAsksForTheReadersToken(t *testing.T) {
	chromium := browserChromium(t)
	tokens := filepath.Join(t.TempDir(), "readers")
	browserReaders(t, tokens, "alice:alice-7f3c9e", "bob:bob-41d2aa")
	readers, err := auth.LoadTokens(tokens)
	if err != nil {
		t.Fatal(err)
	}
	rig := browserStartRigWith(t, time.Minute, func(c *dashboard.Config) { c.Readers = readers })
	h0 := time.Now().UTC().Truncate(time.Hour).Add(-2 * time.Hour)
	rig.send(h0.Add(5 * time.Minute))
	rig.send(h0.Add(6 * time.Minute))
	id := window.ID(window.Ms(h0))
	testenv.CheckFor(t, 20*time.Second, 100*time.Millisecond, func() error {
		req, _ := http.NewRequest("GET", rig.base+"/api/windows", nil)
		req.Header.Set("Authorization", "Bearer alice-7f3c9e")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var v dashboard.View
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
			return err
		}
		for _, w := range v.Windows {
			if w.WindowID == id && w.Count == 2 {
				return nil
			}
		}
		return errNotYet("window " + id + " has not counted 2 yet")
	})

	b := browserStart(t, chromium)
	b.navigate(rig.base + "/")
	const form = `(() => { const a = document.getElementById('auth'); return !a.hidden && document.body.dataset.auth === 'ask' && getComputedStyle(a).display !== 'none'; })()`
	const message = `document.getElementById('auth-message').textContent`
	const describe = `document.body.dataset.auth + ' | ' + document.getElementById('auth').outerHTML`
	b.waitFor(10*time.Second, "the token form", form+` && `+message+`.includes('readers with a token')`, describe)
	if n := browserMust[int](b, `document.querySelectorAll('#windows-body tr[data-window-id]').length`); n != 0 {
		t.Errorf("%d window rows shown before a token was given", n)
	}
	if vis := browserMust[string](b, `getComputedStyle(document.querySelector('main')).visibility`); vis != "hidden" {
		t.Errorf("the data behind the form is %s, want hidden", vis)
	}
	b.screenshot("token-form")

	// A wrong token: refused, asked again, not kept.
	browserTypeToken(b, "alice-7f3c9f")
	b.waitFor(10*time.Second, "the refusal of a wrong token", form+` && `+message+`.includes('refused')`, describe)
	if kept := browserMust[string](b, `sessionStorage.getItem('receiptflow.token') || ''`); kept != "" {
		t.Errorf("a refused token is kept: %q", kept)
	}

	// The right one: the windows, live.
	browserTypeToken(b, "alice-7f3c9e")
	row := fmt.Sprintf(`document.querySelector('#windows-body tr[data-window-id=%q]')`, id)
	liveWith := func(count string) string {
		return `document.getElementById('auth').hidden && document.getElementById('conn').dataset.state === 'live' && ` +
			row + `?.querySelector('.c-count')?.textContent === '` + count + `'`
	}
	live := liveWith("2")
	b.waitFor(15*time.Second, "the windows after the right token", live,
		`document.getElementById('conn').outerHTML + document.getElementById('windows-body').outerHTML + `+describe)
	if kept := browserMust[string](b, `sessionStorage.getItem('receiptflow.token') || ''`); kept != "alice-7f3c9e" {
		t.Errorf("the token kept for the tab: %q", kept)
	}
	if c := browserMust[string](b, `document.cookie`); strings.Contains(c, dashboard.SessionCookie) {
		t.Errorf("the page's script reads the session cookie: %q (want HttpOnly)", c)
	}
	if vis := browserMust[bool](b, `!document.getElementById('forget').hidden`); !vis {
		t.Error("no Forget token button while signed in")
	}
	// A new event arrives by the stream.
	rig.send(h0.Add(7 * time.Minute))
	b.waitFor(15*time.Second, "a count pushed by the stream", row+`?.querySelector('.c-count')?.textContent === '3'`,
		`document.getElementById('windows-body').outerHTML`)
	b.screenshot("token-signed-in")

	// A reload asks no more: the tab keeps the token.
	b.navigate(rig.base + "/")
	live = liveWith("3")
	b.waitFor(15*time.Second, "the windows after a reload", live+` && document.body.dataset.auth === 'token'`, describe)

	// Alice's line removed: the page asks again, saying why.
	browserReaders(t, tokens, "bob:bob-41d2aa")
	b.waitFor(20*time.Second, "the form after the token was revoked", form+` && `+message+`.includes('revoked')`, describe)
	if kept := browserMust[string](b, `sessionStorage.getItem('receiptflow.token') || ''`); kept != "" {
		t.Errorf("a revoked token is still kept: %q", kept)
	}
	browserTypeToken(b, "bob-41d2aa")
	b.waitFor(15*time.Second, "the windows with bob's token", live, describe)

	// Forget token: asked again.
	browserMust[bool](b, `(() => { document.getElementById('forget').click(); return true; })()`)
	b.waitFor(10*time.Second, "the form after Forget token", form+` && `+message+`.includes('forgotten')`, describe)

	if errs := b.messages("exception"); len(errs) > 0 {
		t.Errorf("uncaught exceptions: %v", errs)
	}
}
