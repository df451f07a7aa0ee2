package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/receiptflow/receiptflow/pkg/internal/telemetry"
	"github.com/receiptflow/receiptflow/pkg/lease"
	"github.com/receiptflow/receiptflow/pkg/ledger"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// recorder is the service a group member builds: it records the
// partitions and epochs of every build and runs until ctx ends.
type recorder struct {
	mu     sync.Mutex
	builds []map[int]uint64
	runs   int // services running now
}

func (r *recorder) build(d *Deps) (Runner, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(d.Owned) != len(d.Epochs) {
		return nil, fmt.Errorf("owned %v but epochs %v", d.Owned, d.Epochs)
	}
	r.builds = append(r.builds, maps.Clone(d.Epochs))
	return runFunc(func(ctx context.Context) error {
		r.mu.Lock()
		r.runs++
		r.mu.Unlock()
		<-ctx.Done()
		r.mu.Lock()
		r.runs--
		r.mu.Unlock()
		return nil
	}), nil
}

// owned returns the partitions of the service running now (nil: none).
func (r *recorder) owned() map[int]uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.runs == 0 || len(r.builds) == 0 {
		return nil
	}
	return r.builds[len(r.builds)-1]
}

type runFunc func(ctx context.Context) error

func (f runFunc) Run(ctx context.Context) error { return f(ctx) }

var httpAddr = regexp.MustCompile(`"msg":"http listening"[^\n]*?"addr":"([^"]+)"`)

// groupProc is one windower started without indices, in-process.
type groupProc struct {
	rec    recorder
	log    syncBuf
	cancel context.CancelFunc
	done   chan int
}

func startGroupProc(t *testing.T, natsURL, redisURL string) *groupProc {
	ctx, cancel := context.WithCancel(context.Background())
	g := &groupProc{cancel: cancel, done: make(chan int, 1)}
	go func() {
		g.done <- Main(ctx, "windower", []string{"--nats-url", natsURL, "--redis-url", redisURL, "--partitions", "4",
			"--http-addr", "127.0.0.1:0", "--lease-ttl", "2s", "--stats-interval", "100ms"}, &g.log, g.rec.build)
	}()
	t.Cleanup(func() { cancel(); <-g.done })
	return g
}

func (g *groupProc) readyz() string { return g.get("/readyz") }

func (g *groupProc) get(path string) string {
	m := httpAddr.FindStringSubmatch(g.log.String())
	if m == nil {
		return ""
	}
	resp, err := http.Get("http://" + m[1] + path)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// split returns nil when the running services own the 4 partitions once
// between them, at most ceil(4/n) each, and /readyz says so.
func split(gs ...*groupProc) error {
	seen := map[int]bool{}
	for _, g := range gs {
		own := g.rec.owned()
		if len(own) > (4+len(gs)-1)/len(gs) {
			return fmt.Errorf("one runs %v", own)
		}
		for p, e := range own {
			if seen[p] || e == 0 {
				return fmt.Errorf("partition %d twice, or epoch %d", p, e)
			}
			seen[p] = true
		}
		ps := slices.Sorted(maps.Keys(own))
		if want := ownedText(ps); !strings.Contains(g.readyz(), want) {
			return fmt.Errorf("/readyz %q lacks %q; log:\n%s", g.readyz(), want, g.log.String())
		}
	}
	if len(seen) != 4 {
		return fmt.Errorf("%d of 4 partitions run", len(seen))
	}
	return nil
}

// TestGroupMembersShareAndHandOver: windowers started without
// --instance/--instances split the partitions; the services are built with
// the owned partitions and their epochs; a second member takes its share
// from the first (which rebuilds with the rest); SIGTERM hands the
// partitions back and exits 0.
func TestGroupMembersShareAndHandOver(t *testing.T) {
	_, natsURL := testenv.NATS(t)
	r := testenv.RedisServer(t)
	a := startGroupProc(t, natsURL, r.URL())
	testenv.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error { return split(a) })
	first := a.rec.owned()
	b := startGroupProc(t, natsURL, r.URL())
	testenv.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error { return split(a, b) })
	for p, e := range b.rec.owned() {
		if e <= first[p] {
			t.Errorf("partition %d: the new owner's epoch %d is not above the first's %d", p, e, first[p])
		}
	}
	a.cancel()
	if code := <-a.done; code != 0 {
		t.Fatalf("exit %d after SIGTERM:\n%s", code, a.log.String())
	}
	a.done <- 0 // for the cleanup
	if !strings.Contains(a.log.String(), "partitions handed over") {
		t.Errorf("no hand-over logged:\n%s", a.log.String())
	}
	testenv.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		if err := split(b); err != nil {
			return err
		}
		if m := b.get("/metrics"); !strings.Contains(m, "receiptflow_windower_owned_partitions 4") {
			return fmt.Errorf("no owned_partitions 4 in /metrics")
		}
		return nil
	})
}

// TestFencedRunRebuilds: a service whose Run fails with ledger.ErrFenced
// lost a partition; the daemon reads the leases again and builds it anew
// instead of exiting. The fenced count survives the rebuild (a counter of
// the process, not of one build), while a gauge of the build is dropped.
func TestFencedRunRebuilds(t *testing.T) {
	_, natsURL := testenv.NATS(t)
	r := testenv.RedisServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var log syncBuf
	var mu sync.Mutex
	builds := 0
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, "validator", []string{"--nats-url", natsURL, "--redis-url", r.URL(), "--partitions", "2",
			"--http-addr", "127.0.0.1:0", "--lease-ttl", "2s"}, &log, func(d *Deps) (Runner, error) {
			mu.Lock()
			defer mu.Unlock()
			builds++
			// As the services register: telemetry.Register keeps a
			// collector registered before.
			fenced := telemetry.Register(d.Registerer, prometheus.NewCounter(prometheus.CounterOpts{
				Name: "receiptflow_validator_fenced_writes_total", Help: "test"}))
			if builds == 1 {
				telemetry.Register(d.Registerer, prometheus.NewGauge(prometheus.GaugeOpts{
					Name: "receiptflow_validator_first_build", Help: "test"})).Set(1)
				return runFunc(func(context.Context) error {
					fenced.Inc()
					return fmt.Errorf("apply: %w", ledger.ErrFenced)
				}), nil
			}
			return runFunc(func(ctx context.Context) error { <-ctx.Done(); return nil }), nil
		})
	}()
	testenv.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		select {
		case code := <-done:
			t.Fatalf("exit %d:\n%s", code, log.String())
		default:
		}
		if builds < 2 {
			return fmt.Errorf("%d builds", builds)
		}
		return nil
	})
	m := httpAddr.FindStringSubmatch(log.String())
	if m == nil {
		t.Fatalf("no http address logged:\n%s", log.String())
	}
	v, err := metricValue("http://"+m[1]+"/metrics", "receiptflow_validator_fenced_writes_total")
	if err != nil || v != 1 {
		t.Errorf("fenced_writes_total %v (%v) after the rebuild, want the fenced run's 1", v, err)
	}
	if _, err := metricValue("http://"+m[1]+"/metrics", "receiptflow_validator_first_build"); err == nil {
		t.Errorf("the first build's gauge is still exported after the rebuild")
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d:\n%s", code, log.String())
	}
	if !strings.Contains(log.String(), "a later owner holds a partition") {
		t.Errorf("the fenced run is not logged:\n%s", log.String())
	}
}

// metricValue reads a sample without labels from a /metrics page.
func metricValue(url, name string) (float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(rest), 64)
		}
	}
	return 0, fmt.Errorf("%s not in %s", name, url)
}

// TestWatchOwnershipSeesAChangeWithoutItsSignal: the watcher of a run
// notices that the partitions held differ from those the run was built
// over even when no Changed signal is left for it (the watcher of the run
// before took it as its run ended). Before, the new run stayed idle over
// partitions its member held (make chaos: "runs [], holds [4 5 6 7]").
func TestWatchOwnershipSeesAChangeWithoutItsSignal(t *testing.T) {
	_, url := testenv.NATS(t)
	js := testenv.JetStream(t, url)
	n := wire.For("")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := stream.Ensure(ctx, js, n, stream.Config{}); err != nil {
		t.Fatal(err)
	}
	g, err := lease.Join(ctx, js, lease.Config{Bucket: n.LeaseBucket(), Kind: "windower", Partitions: 4, TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Run(ctx) }()
	<-g.Ready()
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if own := g.Owned(); len(own) != 4 {
			return fmt.Errorf("holds %v", own)
		}
		return nil
	})
	for len(g.Changed()) > 0 { // the signals went to another watcher
		<-g.Changed()
	}
	run, cancelRun := context.WithCancelCause(ctx)
	defer cancelRun(nil)
	(&groups{g: g}).watchOwnership(run, cancelRun, nil) // built over nothing
	select {
	case <-run.Done():
		if !errors.Is(context.Cause(run), errReassigned) {
			t.Fatalf("run ended by %v", context.Cause(run))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the watcher never saw that the member holds 4 partitions and runs none")
	}
}
