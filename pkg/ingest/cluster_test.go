package ingest

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// cluster is three in-process nats-servers routed on loopback, each with
// its own file store.
type cluster struct{ *testenv.Cluster }

func newCluster(t *testing.T) *cluster {
	return &cluster{testenv.NewCluster(t, "ingest", 3, nil)}
}

// leader is the index of the running server that leads RAW.
func (c *cluster) leader(ctx context.Context, js jetstream.JetStream) (int, error) {
	// A request sent just before a node goes may never be answered.
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, wire.Raw)
	if err != nil {
		return 0, err
	}
	info := st.CachedInfo()
	if info.Cluster != nil {
		if i := c.Index(info.Cluster.Leader); i >= 0 && c.Running(i) {
			return i, nil
		}
	}
	return 0, errors.New("no leader of RAW")
}

// TestOrderThroughLeaderLoss ingests into an R3 RAW whose leader is shut
// down twice mid-ingest (and started again once another node leads). RAW
// must then hold, per partition, exactly a clean ingest's message ids in
// the same order: a publish whose ack was lost with its leader is not
// taken for stored, and nothing later overtakes it.
func TestOrderThroughLeaderLoss(t *testing.T) {
	data := fixture(t, 20000)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	_, cleanURL := testenv.NATS(t)
	_, cleanJS := dial(t, cleanURL, 0)
	ensure(t, ctx, cleanJS)
	if _, err := File(ctx, newTestIngester(t, cleanJS, nil), bytes.NewReader(data), nil); err != nil {
		t.Fatalf("clean ingest: %v", err)
	}
	want, _ := rawOrder(t, ctx, cleanJS)

	c := newCluster(t)
	_, js := dial(t, c.URLs(), 0)
	testenv.CheckFor(t, 30*time.Second, 100*time.Millisecond, func() error {
		return stream.Ensure(ctx, js, wire.For(""), stream.Config{Partitions: testPartitions, Replicas: 3})
	})
	const losses = 2
	step := int64(20000 / (losses + 1))
	var acks atomic.Int64
	// Unbuffered, and the ack callback waits for the test to take each
	// kick: a fast ingest could otherwise finish while the test is still
	// handling the first loss, and the second would never happen.
	kick := make(chan struct{})
	in := newTestIngester(t, js, func(o *Config) {
		o.OnAck = func(string, uint64, bool) {
			if acks.Add(1)%step == 0 {
				select {
				case kick <- struct{}{}:
				case <-ctx.Done():
				}
			}
		}
	})
	done := make(chan error, 1)
	go func() {
		_, err := File(ctx, in, bytes.NewReader(data), nil)
		done <- err
	}()
	lost := 0
	for waiting := true; waiting; {
		select {
		case <-kick:
			if lost == losses {
				continue
			}
			var old int
			testenv.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() (err error) {
				old, err = c.leader(ctx, js)
				return err
			})
			c.Stop(old)
			testenv.CheckFor(t, 30*time.Second, 50*time.Millisecond, func() error {
				now, err := c.leader(ctx, js)
				if err == nil && now == old {
					return errors.New("old leader still named")
				}
				return err
			})
			c.Start(old)
			lost++
			t.Logf("shut down and restarted ingest-n%d, the leader of RAW, after %d acks", old+1, acks.Load())
		case err := <-done:
			if err != nil {
				t.Fatalf("ingest with %d leader losses: %v", lost, err)
			}
			waiting = false
		}
	}
	if lost < losses {
		t.Fatalf("ingest ended after %d of %d leader losses", lost, losses)
	}
	var got map[string][]string
	testenv.CheckFor(t, 30*time.Second, 200*time.Millisecond, func() error {
		got, _ = rawOrder(t, ctx, js)
		if d := diffOrder(want, got); d != "" {
			return errors.New(d)
		}
		return nil
	})
}

// TestTwoNodesLostNamesFirstUnconfirmed stops two of the three nodes of an
// R3 RAW mid-ingest: no quorum is left, so ingest must fail with an
// *UnconfirmedError naming a line and its event id. With the nodes back,
// publishing the whole file again completes RAW exactly as a clean ingest
// stores it (what was stored comes back as duplicates).
func TestTwoNodesLostNamesFirstUnconfirmed(t *testing.T) {
	data := fixture(t, 12000)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	_, cleanURL := testenv.NATS(t)
	_, cleanJS := dial(t, cleanURL, 0)
	ensure(t, ctx, cleanJS)
	if _, err := File(ctx, newTestIngester(t, cleanJS, nil), bytes.NewReader(data), nil); err != nil {
		t.Fatalf("clean ingest: %v", err)
	}
	want, _ := rawOrder(t, ctx, cleanJS)

	c := newCluster(t)
	_, js := dial(t, c.URLs(), 0)
	testenv.CheckFor(t, 30*time.Second, 100*time.Millisecond, func() error {
		return stream.Ensure(ctx, js, wire.For(""), stream.Config{Partitions: testPartitions, Replicas: 3})
	})
	var acks atomic.Int64
	// Unbuffered, and the ack callback waits for the test to take each
	// kick: a fast ingest could otherwise finish while the test is still
	// handling the first loss, and the second would never happen.
	kick := make(chan struct{})
	in := newTestIngester(t, js, func(o *Config) {
		o.RetryFor = 2 * time.Second
		o.OnAck = func(string, uint64, bool) {
			if acks.Add(1) == 4000 {
				kick <- struct{}{}
			}
		}
	})
	done := make(chan error, 1)
	go func() {
		_, err := File(ctx, in, bytes.NewReader(data), nil)
		done <- err
	}()
	var err error
	select {
	case <-kick:
		for _, i := range []int{0, 1} {
			c.Stop(i)
		}
		err = <-done
	case err = <-done:
		t.Fatalf("ingest ended before the nodes were stopped: %v", err)
	}
	var ue *UnconfirmedError
	if !errors.As(err, &ue) {
		t.Fatalf("ingest with two of three nodes stopped: %v, want an *UnconfirmedError", err)
	}
	all := lines(data)
	if ue.Line < 4000 || ue.Line > int64(len(all)) || ue.EventID != eventIDOf(all[ue.Line-1]) {
		t.Fatalf("%v: line %d, event id %q; at least 4000 records were confirmed, and the line has %q",
			err, ue.Line, ue.EventID, eventIDOf(all[min(max(ue.Line, 1), int64(len(all)))-1]))
	}
	t.Logf("with two nodes stopped: %v", err)

	for _, i := range []int{0, 1} {
		c.Start(i)
	}
	testenv.CheckFor(t, 60*time.Second, 200*time.Millisecond, func() error {
		_, err := c.leader(ctx, js)
		return err
	})
	if _, err := File(ctx, newTestIngester(t, js, nil), bytes.NewReader(data), nil); err != nil {
		t.Fatalf("ingest again with the nodes back: %v", err)
	}
	testenv.CheckFor(t, 30*time.Second, 200*time.Millisecond, func() error {
		got, _ := rawOrder(t, ctx, js)
		if d := diffOrder(want, got); d != "" {
			return errors.New(d)
		}
		return nil
	})
}
