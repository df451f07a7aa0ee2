package main

import (
	"github.com/nats-io/nats.go"

	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/dashboard"
)

// syncBuffer is a bytes.Buffer safe for the demo's writer and the test's
// reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestDemoBannerURLsMetricsAndStale (issue 14, papercuts 5, 9 and 10): the
// demo prints its URLs once in a banner and writes them to urls.json in
// its data directory; it serves /metrics beside the page; piped, it writes
// plain lines, one per window change, not a table per update; and its
// idle phase shows STALE. Before, the NATS URL was one line among the
// tables, nothing was written to the data directory, /metrics was 404,
// and every second appended a whole table.
func TestDemoBannerURLsMetricsAndStale(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"demo", "--listen", "127.0.0.1:0", "--ingest-listen", "127.0.0.1:0", "--data-dir", dir,
			"--case-every", "1s", "--idle-every", "4s", "--stale-after", "3s"}, &out, &errb)
	}()
	stop := func() int {
		cancel()
		select {
		case code := <-done:
			return code
		case <-time.After(30 * time.Second):
			t.Fatal("demo did not stop within 30 s of its context")
			return -1
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	wait := func(what string, ok func() bool) {
		t.Helper()
		for !ok() {
			if time.Now().After(deadline) {
				stop()
				t.Fatalf("no %s within 60 s\nstdout:\n%s\nstderr:\n%s", what, out.String(), errb.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	var urls demoURLs
	wait("urls.json", func() bool {
		b, err := os.ReadFile(filepath.Join(dir, "urls.json"))
		return err == nil && json.Unmarshal(b, &urls) == nil
	})
	for _, u := range []string{urls.Dashboard, urls.Ingest, urls.Metrics, urls.NATS, urls.Redis} {
		if u == "" || !strings.Contains(out.String(), u) {
			t.Errorf("the banner does not show %q (urls.json %+v):\n%s", u, urls, out.String())
		}
	}
	if urls.DataDir != dir {
		t.Errorf("urls.json data_dir %q, want %q", urls.DataDir, dir)
	}
	get := func(u string) (int, string) {
		resp, err := http.Get(u)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(urls.Metrics); code != 200 || !strings.Contains(body, "receiptflow_validator_") || !strings.Contains(body, "go_goroutines") {
		t.Errorf("GET %s: %d, want 200 with the services' and Go metrics:\n%.500s", urls.Metrics, code, body)
	}
	if code, _ := get(urls.Dashboard); code != 200 {
		t.Errorf("GET %s: %d", urls.Dashboard, code)
	}
	// The banner's curl line works as printed: the front door stores it.
	var try string
	for _, l := range strings.Split(out.String(), "\n") {
		if after, ok := strings.CutPrefix(strings.TrimSpace(l), "try        "); ok {
			try = after
		}
	}
	_, data, ok := strings.Cut(try, "--data-binary '")
	if !strings.HasPrefix(try, "curl -sS "+urls.Ingest+" ") || !ok {
		t.Fatalf("no curl line for %s in the banner:\n%s", urls.Ingest, out.String())
	}
	resp, err := http.Post(urls.Ingest, "application/x-ndjson", strings.NewReader(strings.TrimSuffix(data, "'")))
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(answer), `"status":"stored"`) {
		t.Errorf("the banner's curl line: %d %s", resp.StatusCode, answer)
	}
	// The same record as a NATS request to rf.submit: a duplicate.
	nc, err := nats.Connect(urls.NATS)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	msg, err := nc.Request("rf.submit", []byte(strings.TrimSuffix(data, "'")), 10*time.Second)
	if err != nil || msg.Header.Get("Rf-Status") != "200" || !strings.Contains(string(msg.Data), `"status":"duplicate"`) {
		t.Errorf("nats req rf.submit on the demo's NATS: %v %v", err, msg)
	}
	wait("window line", func() bool { return strings.Contains(out.String(), " window ") })
	// The consumer backlog gauges the docs name (docs/alerts.md,
	// docs/reading-the-dashboard.md) are in the demo's /metrics as in a
	// service's, and records are counted in. Before, neither was.
	var missing []string
	said := ""
	wait("consumer backlog and messages-in metrics", func() bool {
		_, body := get(urls.Metrics)
		missing = missing[:0]
		for _, m := range []string{`receiptflow_validator_messages_in_total{kind="record"}`} {
			if !strings.Contains(body, m) {
				missing = append(missing, m)
			}
		}
		for _, svc := range []string{"validator", "windower", "publisher"} {
			for _, g := range []string{"pending", "ack_pending", "redelivered"} {
				if m := "receiptflow_" + svc + "_consumer_" + g + "_messages{"; !strings.Contains(body, m) {
					missing = append(missing, m)
				}
			}
		}
		if now := fmt.Sprint(missing); len(missing) > 0 && now != said {
			t.Logf("not yet in /metrics: %s", now)
			said = now
		}
		return len(missing) == 0
	})
	// The idle phase starts 4 s in; the source is stale 3 s into it.
	wait("STALE status of the idle source", func() bool { return strings.Contains(out.String(), "STALE: the source has sent nothing since") })
	if !strings.Contains(out.String(), "feed: idle for 1m33s (STALE from 3s in)") {
		t.Errorf("the idle phase is not announced:\n%s", out.String())
	}
	if code := stop(); code != 0 {
		t.Errorf("demo exit %d\n%s", code, errb.String())
	}
	text := out.String()
	if strings.Contains(text, "\x1b[") || strings.Contains(text, "WINDOW ") {
		t.Errorf("piped output has a terminal redraw or a table:\n%s", text)
	}
	// One line per change: no window line is written twice in a row.
	seen := map[string]string{}
	for _, l := range strings.Split(text, "\n") {
		_, rest, ok := strings.Cut(l, " window ")
		if !ok {
			continue
		}
		id, _, _ := strings.Cut(rest, " ")
		if seen[id] == rest {
			t.Errorf("window %s written again unchanged: %q", id, l)
		}
		seen[id] = rest
	}
}

// TestScreenRedrawsInPlaceOnATerminal: on a terminal the screen is cleared
// and redrawn with the banner at the top, and notices shown under it.
func TestScreenRedrawsInPlaceOnATerminal(t *testing.T) {
	var b bytes.Buffer
	s := newScreen(&b, true, "BANNER\n", 5)
	v := dashboard.View{Generation: "1", Connected: true, Loaded: true,
		Windows: []dashboard.WindowView{{WindowID: "2026-12-04T03", Count: 7, Version: 2, Status: "open"}}}
	s.note("feed: idle")
	s.show(v)
	s.show(v)
	frames := strings.Split(b.String(), "\x1b[H\x1b[2J")
	if len(frames) != 3 || frames[0] != "" {
		t.Fatalf("want two redraws from home, got %q", b.String())
	}
	for _, f := range frames[1:] {
		if !strings.HasPrefix(f, "BANNER\nfeed: idle\n") || !strings.Contains(f, "2026-12-04T03") {
			t.Errorf("frame %q: want the banner, the notice and the window", f)
		}
	}
}

func TestDemoIdleShowsStale(t *testing.T) {
	for _, sa := range []time.Duration{2 * time.Minute, 10 * time.Second} {
		if shown := demoIdleFor(sa) - sa; shown < 60*time.Second {
			t.Errorf("--stale-after %s: STALE shows for %s of the idle phase, want at least a minute", sa, shown)
		}
	}
}

// TestStatusOfAFreshDeployment (issue 26): before the publisher's first
// report a reader that just started says the deployment is starting; it
// used to say STALE for the first second of every demo.
func TestStatusOfAFreshDeployment(t *testing.T) {
	st := strings.Join(statusParts(dashboard.View{Generation: "1", Connected: true, Loaded: true, Starting: true}), " · ")
	if strings.Contains(st, "STALE") || !strings.Contains(st, "starting: waiting for the publisher's first health report") {
		t.Errorf("status %q; want starting, not STALE", st)
	}
}
