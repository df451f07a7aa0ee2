package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/receiptflow/receiptflow/pkg/daemon"
	"github.com/receiptflow/receiptflow/pkg/ledger"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// TestMain lets a test start this binary again as a service process
// (testenv.StartMain): its first argument names the service.
func TestMain(m *testing.M) {
	testenv.RunMainIfChild(func() {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := daemon.Main(ctx, os.Args[1], os.Args[2:], os.Stderr, daemon.Build)
		stop()
		os.Exit(code)
	})
	os.Exit(m.Run())
}

var fenceListening = regexp.MustCompile(`"msg":"http listening",.*"addr":"([0-9.:]+)"`)

// TestStoppedWindowerProcessIsFenced: two windower processes own the same
// partition, with explicit epochs (--fence-epoch, static mode). The first
// (epoch 1) stops itself with SIGSTOP just before its first apply script
// (failpoint windower.before-write=stop@every:1), holding an unacked batch,
// as a process paused past its lease would. The second (epoch 2) takes
// the partition and applies everything. Then the first gets SIGCONT: its
// apply is refused (receiptflow_windower_fenced_writes_total > 0), it
// stays up processing nothing, and every window is the clean result.
func TestStoppedWindowerProcessIsFenced(t *testing.T) {
	const n = 400
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	_, natsURL := testenv.NATS(t)
	r := testenv.RedisServer(t)
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	names := wire.For("")
	if err := stream.Ensure(ctx, js, names, stream.Config{Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	// n on-time submissions in event-time order over four hourly windows,
	// each counted once.
	base := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	want := map[string]int64{}
	for i := 0; i < n; i++ {
		id := "ev-" + strconv.Itoa(i)
		at := base.Add(time.Duration(i) * 36 * time.Second)
		want[at.Truncate(time.Hour).Format("2006-01-02T15")]++
		m := stream.NewMsg(names.Subject(wire.Valid, 0), id, []byte(`{}`))
		m.Header.Set(wire.HdrKind, "s")
		m.Header.Set(wire.HdrTime, strconv.FormatInt(at.UnixMilli(), 10))
		m.Header.Set(wire.HdrEventID, id)
		m.Header.Set(wire.HdrRawSeq, strconv.Itoa(i+1))
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	windower := func(epoch int, failpoints string) *testenv.MainProc {
		return testenv.StartMain(t, "windower", "--nats-url", natsURL, "--redis-url", r.URL(), "--partitions", "1",
			"--owned", "0", "--fence-epoch", strconv.Itoa(epoch), "--failpoints", failpoints,
			"--http-addr", "127.0.0.1:0", "--stats-interval", "100ms")
	}
	first := windower(1, "windower.before-write=stop@every:1")
	stopped := func() error {
		if !strings.Contains(first.Output(), "stopping process (SIGSTOP)") {
			return errors.New("the first windower has not stopped at its first apply")
		}
		if st, err := first.State(); err != nil || st != 'T' {
			return fmt.Errorf("the first windower's state is %q (%v), want T (stopped)", st, err)
		}
		return nil
	}
	testenv.CheckFor(t, 20*time.Second, 20*time.Millisecond, stopped)
	rdb := redis.NewClient(&redis.Options{Addr: strings.TrimPrefix(r.URL(), "redis://")})
	defer rdb.Close()
	store := ledger.NewStore(rdb, ledger.Config{Keys: ledger.Keys{Prefix: names.RedisPrefix()}})
	if ck, err := store.Checkpoint(ctx, 0); err != nil || ck.Seq != 0 {
		t.Fatalf("checkpoint %+v, %v with the first windower stopped; want nothing applied; its log:\n%s", ck, err, first.Output())
	}

	second := windower(2, "")
	testenv.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		ck, err := store.Checkpoint(ctx, 0)
		if err != nil || ck.Seq != n || ck.Published != n {
			return fmt.Errorf("checkpoint %+v, %v; want all %d applied and published\n%s", ck, err, n, second.Output())
		}
		return nil
	})
	clean := fenceWindows(t, ctx, store)
	// Still stopped: only the test wakes it.
	if err := stopped(); err != nil {
		t.Fatal(err)
	}

	first.Signal(t, syscall.SIGCONT)
	addr := fenceListening.FindStringSubmatch(first.Output())
	if addr == nil {
		t.Fatalf("no http address in the first windower's log:\n%s", first.Output())
	}
	testenv.CheckFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		v, err := fenceMetric("http://"+addr[1]+"/metrics", "receiptflow_windower_fenced_writes_total")
		if err != nil {
			return err
		}
		if v < 1 {
			return fmt.Errorf("fenced writes %v, want at least 1", v)
		}
		return nil
	})
	if !strings.Contains(first.Output(), "processes nothing more") {
		t.Fatalf("the fenced windower did not say it stopped processing:\n%s", first.Output())
	}
	got := fenceWindows(t, ctx, store)
	if len(got) != len(want) || len(clean) != len(want) {
		t.Fatalf("windows %v (before the wake-up %v), want %v", got, clean, want)
	}
	for id, c := range want {
		if got[id] != c || clean[id] != c {
			t.Errorf("window %s: %d after the wake-up, %d before, want %d", id, got[id], clean[id], c)
		}
	}
	first.Terminate(t)
	second.Terminate(t)
	if code := first.Wait(t, 20*time.Second); code != 0 {
		t.Errorf("the fenced windower exited %d on SIGTERM", code)
	}
	if code := second.Wait(t, 20*time.Second); code != 0 {
		t.Errorf("the second windower exited %d on SIGTERM", code)
	}
}

// fenceWindows is each window's count in partition 0, checking that each
// event was counted once (version = count).
func fenceWindows(t *testing.T, ctx context.Context, store *ledger.Store) map[string]int64 {
	t.Helper()
	ids, err := store.Windows(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	v, err := store.Read(ctx, 0, ids)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for id, p := range v.Partials {
		if p.Version != p.Count {
			t.Errorf("window %s: version %d for count %d", id, p.Version, p.Count)
		}
		out[id] = p.Count
	}
	return out
}

// fenceMetric reads a counter's value from a /metrics page.
func fenceMetric(url, name string) (float64, error) {
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
