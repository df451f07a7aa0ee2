package daemon

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// startService runs service name with args until it has built its
// Runner, and returns the Deps it got and the exit code (0 once started,
// after ctx ends; the code of an exit before that).
func startService(t *testing.T, name string, args ...string) (*Deps, int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var log syncBuf
	got := make(chan *Deps, 1)
	s := stub{started: make(chan struct{})}
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, name, append(args, "--http-addr", "127.0.0.1:0"), &log, func(d *Deps) (Runner, error) { got <- d; return s, nil })
	}()
	select {
	case <-s.started:
		cancel()
		return <-got, <-done, log.String()
	case code := <-done:
		return nil, code, log.String()
	}
}

// TestServicesTakeTheRecordedParameters (issue 25): the set-up job
// records its parameters on RAW; a service started without them runs
// with the record's, and one given a value that disagrees refuses to
// start, naming the parameter and both values.
func TestServicesTakeTheRecordedParameters(t *testing.T) {
	_, natsURL := testenv.NATS(t)
	r := testenv.RedisServer(t)
	var setup syncBuf
	if code := Main(context.Background(), "validator", []string{"--ensure-only", "--nats-url", natsURL,
		"--partitions", "2", "--grace", "30m", "--max-future-skew", "1m", "--hot-keys", "store-a=2"}, &setup, nil); code != 0 {
		t.Fatalf("--ensure-only exited %d:\n%s", code, setup.String())
	}
	d, code, log := startService(t, "windower", "--nats-url", natsURL, "--redis-url", r.URL())
	if code != 0 || d == nil {
		t.Fatalf("windower without parameter flags: exit %d\n%s", code, log)
	}
	c := d.Common
	if c.Partitions != 2 || c.Grace != 30*time.Minute || c.MaxFutureSkew != time.Minute || c.HotKeys != "store-a=2" || len(d.Owned) != 2 {
		t.Fatalf("windower runs with %+v, owns %v; want the record's", c.Params, d.Owned)
	}
	_, code, log = startService(t, "windower", "--nats-url", natsURL, "--redis-url", r.URL(), "--grace", "2h")
	if code != 1 || !strings.Contains(log, "--grace 2h0m0s disagrees") || !strings.Contains(log, "30m0s") {
		t.Fatalf("windower --grace 2h against a record of 30m: exit %d, want 1 naming both values\n%s", code, log)
	}
	t.Setenv("RECEIPTS_MAX_FUTURE_SKEW", "5m")
	var again syncBuf
	if code := Main(context.Background(), "validator", []string{"--ensure-only", "--nats-url", natsURL}, &again, nil); code != 1 ||
		!strings.Contains(again.String(), "--max-future-skew 5m0s disagrees") || !strings.Contains(again.String(), "1m0s") {
		t.Fatalf("set-up job with RECEIPTS_MAX_FUTURE_SKEW=5m against a record of 1m: exit %d\n%s", code, again.String())
	}
}

// TestServicesWithoutRecordedParameters: RAW made by a version that
// recorded nothing keeps working with the flags; the first set-up (here a
// service's own) records them, and the next service start takes them.
func TestServicesWithoutRecordedParameters(t *testing.T) {
	_, natsURL := testenv.NATS(t)
	r := testenv.RedisServer(t)
	js := testenv.JetStream(t, natsURL)
	ctx := context.Background()
	if err := stream.Ensure(ctx, js, wire.For(""), stream.Config{}); err != nil {
		t.Fatal(err)
	}
	d, code, log := startService(t, "publisher", "--nats-url", natsURL, "--redis-url", r.URL(), "--grace", "2h", "--partitions", "4")
	if code != 0 || d == nil || d.Common.Grace != 2*time.Hour || d.Common.Partitions != 4 {
		t.Fatalf("publisher --grace 2h on unrecorded state: exit %d\n%s", code, log)
	}
	meta, err := stream.RawMetadata(ctx, js)
	if err != nil || meta["rf.1.grace"] != "2h0m0s" || meta["rf.1.partitions"] != "4" {
		t.Fatalf("after the first set-up RAW records %v (%v)", meta, err)
	}
	if d, code, log = startService(t, "publisher", "--nats-url", natsURL, "--redis-url", r.URL()); code != 0 || d == nil || d.Common.Grace != 2*time.Hour {
		t.Fatalf("publisher after the record: exit %d, %+v\n%s", code, d, log)
	}
}
