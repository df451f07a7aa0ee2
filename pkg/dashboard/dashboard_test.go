package dashboard

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// fixture is a nats-server with generation buckets and a running
// dashboard serving on 127.0.0.1.
type fixture struct {
	t    *testing.T
	ctx  context.Context
	js   jetstream.JetStream
	svc  *Service
	base string
}

func start(t *testing.T, url string, cfg Config) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listener = ln
	dnc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dnc.Close)
	svc, err := New(dnc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return &fixture{t: t, ctx: ctx, js: js, svc: svc, base: "http://" + ln.Addr().String()}
}

func (f *fixture) bucket(gen string) jetstream.KeyValue {
	f.t.Helper()
	if err := stream.Ensure(f.ctx, f.js, wire.For(gen), stream.Config{Partitions: 2}); err != nil {
		f.t.Fatal(err)
	}
	kv, err := f.js.KeyValue(f.ctx, wire.For(gen).Bucket())
	if err != nil {
		f.t.Fatal(err)
	}
	return kv
}

func (f *fixture) put(kv jetstream.KeyValue, key string, v any) {
	f.t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := kv.Put(f.ctx, key, b); err != nil {
		f.t.Fatalf("put %s: %v", key, err)
	}
}

func (f *fixture) putWindow(kv jetstream.KeyValue, w wire.Window) {
	f.put(kv, wire.WindowKey(w.WindowID), w)
}

func (f *fixture) putHealth(kv jetstream.KeyValue, now time.Time) {
	f.put(kv, wire.HealthKey, wire.Health{UpdatedAt: now, SourceLastSeen: now, StaleAfter: "2m0s", Grace: "1h0m0s",
		GlobalWatermark: now.Add(-5 * time.Minute), Watermarks: []time.Time{now, now}})
}

func (f *fixture) windows() View {
	f.t.Helper()
	var v View
	f.getJSON("/api/windows", &v)
	return v
}

func (f *fixture) getJSON(path string, v any) {
	f.t.Helper()
	resp, err := http.Get(f.base + path)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		f.t.Fatalf("GET %s: %s", path, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		f.t.Fatalf("GET %s: %v", path, err)
	}
}

func findWindow(v View, id string) (WindowView, bool) {
	for _, w := range v.Windows {
		if w.WindowID == id {
			return w, true
		}
	}
	return WindowView{}, false
}

func hasCount(f *fixture, id string, count int64) func() error {
	return func() error {
		w, ok := findWindow(f.windows(), id)
		if !ok || w.Count != count {
			return fmt.Errorf("window %s: %+v (found %v), want count %d", id, w, ok, count)
		}
		return nil
	}
}

func TestServesBucketAndFollowsThePointer(t *testing.T) {
	_, url := testenv.NATS(t)
	f := start(t, url, Config{})
	kv1 := f.bucket("1")
	now := time.Now().UTC()
	f.putHealth(kv1, now)
	w := snap(window.ID(window.Ms(now)), 7, 2, window.StatusOpen)
	f.putWindow(kv1, w)
	testenv.CheckFor(t, 10*time.Second, 50*time.Millisecond, hasCount(f, w.WindowID, 7))
	v := f.windows()
	if v.Generation != "1" || !v.Loaded || !v.Connected || v.Stale || v.Health == nil {
		t.Fatalf("view: generation %q loaded %v connected %v stale %v (%s) health %v", v.Generation, v.Loaded, v.Connected, v.Stale, v.StaleReason, v.Health != nil)
	}

	// The pointer moves to generation 2: the dashboard shows its bucket.
	kv2 := f.bucket("2")
	f.putHealth(kv2, now)
	w2 := snap(w.WindowID, 9, 3, window.StatusOpen)
	w2.Generation = "2"
	f.putWindow(kv2, w2)
	ctrl, err := f.js.KeyValue(f.ctx, wire.ControlBucket)
	if err != nil {
		t.Fatal(err)
	}
	f.put(ctrl, wire.ActiveKey, map[string]string{"generation": "2"})
	testenv.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		if v := f.windows(); v.Generation != "2" {
			return fmt.Errorf("generation %q, want 2", v.Generation)
		}
		return nil
	})
	testenv.CheckFor(t, 5*time.Second, 50*time.Millisecond, hasCount(f, w.WindowID, 9))
	var hv HealthView
	f.getJSON("/api/health", &hv)
	if hv.Generation != "2" || hv.Health == nil || hv.Watch.LastReason != reasonSwitched {
		t.Fatalf("/api/health: %+v", hv)
	}
}

func TestRewatchesAfterServerRestart(t *testing.T) {
	s, url := testenv.NATS(t)
	reg := prometheus.NewRegistry()
	// Silence is long, so only the restart can make the dashboard watch
	// again within the test.
	f := start(t, url, Config{Silence: time.Hour, Registerer: reg})
	kv := f.bucket("1")
	now := time.Now().UTC()
	f.putHealth(kv, now)
	w := snap(window.ID(window.Ms(now)), 1, 1, window.StatusOpen)
	f.putWindow(kv, w)
	testenv.CheckFor(t, 10*time.Second, 50*time.Millisecond, hasCount(f, w.WindowID, 1))
	loads := counterValue(t, reg, "receiptflow_dashboard_bucket_loads_total", "")

	testenv.RestartNATS(t, s)
	// The writer's connection reconnects by itself; keep writing until an
	// update after the restart shows in a bucket loaded again because of
	// the reconnect. A put sent before the writer notices that the old
	// server is gone is lost with that connection and never answered, so
	// each attempt has its own deadline.
	w.Count, w.Version = 2, 2
	testenv.CheckFor(t, 30*time.Second, 200*time.Millisecond, func() error {
		b, _ := json.Marshal(w)
		pctx, cancel := context.WithTimeout(f.ctx, 2*time.Second)
		defer cancel()
		if _, err := kv.Put(pctx, wire.WindowKey(w.WindowID), b); err != nil {
			return err
		}
		if n := counterValue(t, reg, "receiptflow_dashboard_rewatches_total", reasonReconnected); n == 0 {
			return fmt.Errorf("no re-watch for reason %q yet", reasonReconnected)
		}
		if n := counterValue(t, reg, "receiptflow_dashboard_bucket_loads_total", ""); n <= loads {
			return fmt.Errorf("bucket not loaded again since the restart (%v loads)", n)
		}
		return hasCount(f, w.WindowID, 2)()
	})
	if v := f.windows(); !v.Connected || !v.Loaded {
		t.Fatalf("after a restart: connected %v loaded %v", v.Connected, v.Loaded)
	}
}

// counterValue returns the value of the counter called name in reg, for the
// series whose reason label is reason ("": the series without labels); 0
// if there is none yet.
func counterValue(t *testing.T, reg prometheus.Gatherer, name, reason string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, fam := range families {
		if fam.GetName() != name {
			continue
		}
		for _, m := range fam.GetMetric() {
			got := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" {
					got = l.GetValue()
				}
			}
			if got == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func TestEventStreamPushesChanges(t *testing.T) {
	_, url := testenv.NATS(t)
	f := start(t, url, Config{})
	kv := f.bucket("1")
	now := time.Now().UTC()
	f.putHealth(kv, now)
	testenv.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		if v := f.windows(); !v.Loaded || v.Health == nil {
			return fmt.Errorf("not loaded yet")
		}
		return nil
	})

	req, _ := http.NewRequestWithContext(f.ctx, http.MethodGet, f.base+"/api/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	views := make(chan View, 64)
	go func() {
		defer close(views)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<22)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var v View
				if json.Unmarshal([]byte(data), &v) == nil {
					views <- v
				}
			}
		}
	}()
	select {
	case <-views: // the current view, at once
	case <-time.After(2 * time.Second):
		t.Fatal("no view on connect")
	}
	w := snap(window.ID(window.Ms(now)), 4, 1, window.StatusOpen)
	put := time.Now()
	f.putWindow(kv, w)
	deadline := time.After(time.Second)
	for {
		select {
		case v, ok := <-views:
			if !ok {
				t.Fatal("stream ended")
			}
			if got, ok := findWindow(v, w.WindowID); ok && got.Count == 4 {
				t.Logf("pushed %s after the KV put", time.Since(put).Round(time.Millisecond))
				return
			}
		case <-deadline:
			t.Fatal("the change was not pushed within 1s of the KV put")
		}
	}
}

func TestStaleWhenTheSourceOrPublisherIsSilent(t *testing.T) {
	_, url := testenv.NATS(t)
	clock := time.Now().UTC()
	f := start(t, url, Config{StaleAfter: 2 * time.Second, Now: func() time.Time { return clock }})
	kv := f.bucket("1")
	f.putHealth(kv, clock.Add(-3*time.Second)) // publisher silent for 3s
	open := snap(window.ID(window.Ms(clock)), 1, 1, window.StatusOpen)
	final := snap(window.ID(window.Ms(clock.Add(-3*time.Hour))), 5, 3, window.StatusFinal)
	f.putWindow(kv, open)
	f.putWindow(kv, final)
	testenv.CheckFor(t, 10*time.Second, 50*time.Millisecond, hasCount(f, final.WindowID, 5))
	v := f.windows()
	if !v.Stale || !strings.Contains(v.StaleReason, "publisher has not reported") {
		t.Fatalf("stale %v (%s); want stale, publisher silent", v.Stale, v.StaleReason)
	}
	if w, _ := findWindow(v, open.WindowID); !w.Stale {
		t.Errorf("open window not marked stale")
	}
	if w, _ := findWindow(v, final.WindowID); w.Stale || !w.Final {
		t.Errorf("final window: stale %v final %v; a final window is never stale", w.Stale, w.Final)
	}
	for _, h := range v.Hours {
		if h.State == HourConfirmedZero && h.Status != window.StatusFinal {
			t.Errorf("hour %s: confirmed zero but %q", h.WindowID, h.Status)
		}
	}
}

// TestFreshDeploymentIsStarting: a bucket without a health report yet,
// seen by a dashboard that just started, is a deployment starting, not
// stale data.
func TestFreshDeploymentIsStarting(t *testing.T) {
	_, url := testenv.NATS(t)
	f := start(t, url, Config{StaleAfter: time.Hour})
	f.bucket("1")
	testenv.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		if v := f.windows(); !v.Loaded {
			return fmt.Errorf("not loaded yet")
		}
		return nil
	})
	var hv HealthView
	f.getJSON("/api/health", &hv)
	if v := f.windows(); v.Stale || !v.Starting || hv.Stale || !hv.Starting {
		t.Fatalf("view stale %v (%s) starting %v, health stale %v starting %v; want starting, not stale",
			v.Stale, v.StaleReason, v.Starting, hv.Stale, hv.Starting)
	}
}

func TestProbesAndPage(t *testing.T) {
	_, url := testenv.NATS(t)
	f := start(t, url, Config{})
	f.bucket("1")
	for _, c := range []struct{ path, contains, header string }{
		{"/healthz", "ok", ""},
		{"/", `<svg id="chart"`, "Content-Security-Policy"},
		{"/static/app.js", "EventSource", ""},
		{"/static/style.css", "--final", ""},
	} {
		resp, err := http.Get(f.base + c.path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), c.contains) {
			t.Errorf("GET %s: %s, body without %q", c.path, resp.Status, c.contains)
		}
		if c.header != "" && !strings.Contains(resp.Header.Get(c.header), "default-src 'self'") {
			t.Errorf("GET %s: %s %q", c.path, c.header, resp.Header.Get(c.header))
		}
	}
	testenv.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		resp, err := http.Get(f.base + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz: %s", resp.Status)
		}
		return nil
	})
	if resp, err := http.Get(f.base + "/api/windows?recent=x"); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Errorf("bad recent: %v %v", resp, err)
	}
}

// TestQuietBucketIsNotWatchedAgain (issue 26): a bucket that does not
// change (the demo's planned idle: the publisher rewrites meta.* only
// every keep-alive) is no reason to re-watch; the page and receiptctl
// watch said "re-watched 2× (last: silent)", which the docs say means
// broker restarts. The watch stays live through the quiet.
func TestQuietBucketIsNotWatchedAgain(t *testing.T) {
	_, url := testenv.NATS(t)
	f := start(t, url, Config{Silence: 100 * time.Millisecond})
	kv := f.bucket("1")
	w := snap(window.ID(window.Ms(time.Now())), 3, 1, window.StatusOpen)
	f.putWindow(kv, w)
	testenv.CheckFor(t, 10*time.Second, 50*time.Millisecond, hasCount(f, w.WindowID, 3))
	before := f.windows().Watch // a re-watch while the bucket did not exist yet is fine
	testenv.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		if v := f.windows(); v.Watch.QuietChecks < before.QuietChecks+3 {
			return fmt.Errorf("watch %+v, want 3 more quiet checks than %+v", v.Watch, before)
		}
		return nil
	})
	if v := f.windows(); v.Watch.Reloads != before.Reloads {
		t.Fatalf("watch %+v, was %+v: re-watched a quiet bucket", v.Watch, before)
	}
	w.Count, w.Version = 4, 2
	f.putWindow(kv, w)
	testenv.CheckFor(t, 10*time.Second, 50*time.Millisecond, hasCount(f, w.WindowID, 4))
}

// TestWatchBehind: the silence check finds a watch behind exactly when
// the bucket holds a revision later than the watch's latest.
func TestWatchBehind(t *testing.T) {
	_, url := testenv.NATS(t)
	f := start(t, url, Config{Silence: time.Hour})
	kv := f.bucket("1")
	if behind, err := f.svc.watchBehind(f.ctx, kv, 0); err != nil || behind {
		t.Fatalf("empty bucket: behind %v, %v", behind, err)
	}
	var last uint64
	for i := range 3 {
		rev, err := kv.Put(f.ctx, wire.WindowKey(fmt.Sprintf("2026-12-02T1%d", i)), []byte(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		last = rev
	}
	for _, c := range []struct {
		rev    uint64
		behind bool
	}{{last, false}, {last - 1, true}, {0, true}} {
		if behind, err := f.svc.watchBehind(f.ctx, kv, c.rev); err != nil || behind != c.behind {
			t.Errorf("watch at %d of %d: behind %v (%v), want %v", c.rev, last, behind, err, c.behind)
		}
	}
}
