package stream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// orderedMsg is message n of partition p: id "p<p>-<n>", header Rf-Raw-Seq n.
func orderedMsg(n wire.Names, p, seq int) *nats.Msg {
	m := NewMsg(n.Subject(wire.Valid, p), fmt.Sprintf("p%d-%d", p, seq), []byte(strconv.Itoa(seq)))
	m.Header.Set(wire.HdrRawSeq, strconv.Itoa(seq))
	return m
}

// orderedBatches is the input of one partition: batches of size messages
// 1..total, each batch also repeating a few ids of the batch before it and
// one of its own (duplicates the stream must drop).
func orderedBatches(n wire.Names, p, total, size int) [][]*nats.Msg {
	var out [][]*nats.Msg
	for first := 1; first <= total; first += size {
		var b []*nats.Msg
		for seq := first; seq < first+size && seq <= total; seq++ {
			b = append(b, orderedMsg(n, p, seq))
			if seq%50 == 7 && seq > 20 {
				b = append(b, orderedMsg(n, p, seq-20), orderedMsg(n, p, seq-1))
			}
		}
		out = append(out, b)
	}
	return out
}

// checkOrdered reads stream VALID and fails unless each partition holds
// exactly 1..total, in that order.
func checkOrdered(t *testing.T, ctx context.Context, js jetstream.JetStream, n wire.Names, partitions, total int) {
	t.Helper()
	var got map[string][]int
	// After a node loss the stream may still be electing its leader.
	testenv.CheckFor(t, 30*time.Second, 200*time.Millisecond, func() error {
		got = map[string][]int{}
		return ReadAll(ctx, js, n.Stream(wire.Valid), func(m jetstream.Msg) error {
			seq, err := strconv.Atoi(m.Headers().Get(wire.HdrRawSeq))
			got[m.Subject()] = append(got[m.Subject()], seq)
			return err
		})
	})
	for p := 0; p < partitions; p++ {
		seqs := got[n.Subject(wire.Valid, p)]
		breaks, dups, seen := 0, 0, map[int]bool{}
		for i, s := range seqs {
			if seen[s] {
				dups++
			}
			seen[s] = true
			if i > 0 && s < seqs[i-1] {
				if breaks < 3 {
					t.Errorf("partition %d: position %d holds %d after %d", p, i, s, seqs[i-1])
				}
				breaks++
			}
		}
		if breaks > 0 || dups > 0 || len(seen) != total {
			t.Errorf("partition %d: %d messages, %d distinct of %d, %d order breaks, %d duplicates", p, len(seqs), len(seen), total, breaks, dups)
		}
	}
}

// TestPublishOrderedDropsDuplicatesInOrder: ids already stored (a
// redelivered batch after a crash, with a publisher that knows nothing of
// them), ids repeated within a batch, and more messages than one atomic
// batch holds; the stream ends with every message once, in order.
func TestPublishOrderedDropsDuplicatesInOrder(t *testing.T) {
	ctx, js, n := validOnOneServer(t)
	all := func(from, to int) []*nats.Msg {
		var out []*nats.Msg
		for seq := from; seq <= to; seq++ {
			out = append(out, orderedMsg(n, 0, seq))
		}
		return out
	}
	first := NewOrderedPublisher(js)
	if dups, err := first.PublishOrdered(ctx, all(1, 300)); err != nil || dups != 0 {
		t.Fatalf("first batch: %d dups, %v", dups, err)
	}
	// The same publisher leaves out what it stored (no round trip).
	if dups, err := first.PublishOrdered(ctx, all(250, 320)); err != nil || dups != 51 {
		t.Fatalf("overlapping batch: %d dups, %v", dups, err)
	}
	// A new publisher (a restarted validator) learns of them from the
	// server: the batch is refused and split until the stored ids stand
	// alone, and everything else is stored in order.
	again := NewOrderedPublisher(js)
	mixed := all(200, 330)
	mixed = append(mixed, orderedMsg(n, 0, 331), orderedMsg(n, 0, 331), orderedMsg(n, 0, 5))
	mixed = append(mixed, all(332, 2600)...) // more than AtomicBatchMax
	dups, err := again.PublishOrdered(ctx, mixed)
	if err != nil {
		t.Fatal(err)
	}
	if want := 121 + 1 + 1; dups != want {
		t.Fatalf("%d duplicates, want %d", dups, want)
	}
	checkOrdered(t, ctx, js, n, 1, 2600)
}

// TestPublishOrderedNeedsEnsure: a VALID stream created
// before atomic batches were turned on refuses them with a clear error, and
// Ensure updates it so that they are accepted.
func TestPublishOrderedNeedsEnsure(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, url := testenv.NATS(t)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	n := wire.For("")
	old := streamConfig(n, wire.Valid, Config{}.withDefaults())
	old.AllowAtomicPublish = false
	if _, err := js.CreateStream(ctx, old); err != nil {
		t.Fatal(err)
	}
	pub := NewOrderedPublisher(js)
	_, err = pub.PublishOrdered(ctx, []*nats.Msg{orderedMsg(n, 0, 1), orderedMsg(n, 0, 2)})
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != ErrCodeBatchDisabled || !strings.Contains(err.Error(), "Ensure") {
		t.Fatalf("publish to a stream without atomic publish: %v", err)
	}
	if err := Ensure(ctx, js, n, Config{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pub.PublishOrdered(ctx, []*nats.Msg{orderedMsg(n, 0, 1), orderedMsg(n, 0, 2)}); err != nil {
		t.Fatal(err)
	}
	checkOrdered(t, ctx, js, n, 1, 2)

	// Copies read back carry the batch headers; published again (a
	// replay) they are plain messages.
	var copies []*nats.Msg
	if err := ReadAll(ctx, js, n.Stream(wire.Valid), func(m jetstream.Msg) error {
		c := NewMsg(n.Subject(wire.Valid, 1), "copy-"+m.Headers().Get(jetstream.MsgIDHeader), m.Data())
		for k, v := range m.Headers() {
			if k != jetstream.MsgIDHeader {
				c.Header[k] = v
			}
		}
		copies = append(copies, c)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if copies[1].Header.Get(wire.HdrBatchCommit) == "" {
		t.Fatalf("stored batch message without its headers: %v", copies[1].Header)
	}
	if _, err := PublishAll(ctx, js, copies); err != nil {
		t.Fatalf("publishing copies again: %v", err)
	}
	if _, err := NewOrderedPublisher(js).PublishOrdered(ctx, copies[:1]); err != nil {
		t.Fatalf("publishing a copy again in order: %v", err)
	}
}

// orderedCluster is three in-process nats-servers routed to each other.
type orderedCluster struct{ *testenv.Cluster }

func startOrderedCluster(t *testing.T) *orderedCluster {
	return &orderedCluster{testenv.NewCluster(t, "ordered", 3, nil)}
}

// leader is the index of the server leading stream name.
func (c *orderedCluster) leader(ctx context.Context, js jetstream.JetStream, name string) (int, error) {
	st, err := js.Stream(ctx, name)
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, err
	}
	if info.Cluster != nil {
		if i := c.Index(info.Cluster.Leader); i >= 0 && c.Running(i) {
			return i, nil
		}
	}
	return 0, errors.New("no stream leader")
}

// publishFunc stores one batch (it may fail; the caller publishes the batch
// again, as a validator does after a redelivery).
type publishFunc func(ctx context.Context, msgs []*nats.Msg) error

// TestPublishOrderedKeepsOrderThroughLeaderLoss: four partitions publish
// batches to an R3 VALID while its leader is shut down twice (the first
// node is back before the second goes). Every failed batch is published
// again, as after a validator restart. Each partition must hold every
// message once, in order. Publishing with PublishAll instead (the old
// validator) breaks the order here: nats.go retries a publish answered "no
// responders" while later ones of its batch are stored.
func TestPublishOrderedKeepsOrderThroughLeaderLoss(t *testing.T) {
	testOrderedLeaderLoss(t, func(js jetstream.JetStream) publishFunc {
		pub := NewOrderedPublisher(js)
		return func(ctx context.Context, msgs []*nats.Msg) error {
			_, err := pub.PublishOrdered(ctx, msgs)
			return err
		}
	})
}

func testOrderedLeaderLoss(t *testing.T, newPublish func(jetstream.JetStream) publishFunc) {
	const partitions, total, size = 4, 8000, 200
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := startOrderedCluster(t)
	nc, err := nats.Connect(c.URLs(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(8192), jetstream.WithPublishAsyncTimeout(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n := wire.For("")
	cfg := streamConfig(n, wire.Valid, Config{Replicas: 3}.withDefaults())
	testenv.CheckFor(t, 20*time.Second, 100*time.Millisecond, func() error {
		_, err := js.CreateStream(ctx, cfg)
		return err
	})

	var stored sync.Map // partition -> batches done
	var failures sync.Map
	var wg sync.WaitGroup
	errs := make(chan error, partitions)
	for p := 0; p < partitions; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			publish := newPublish(js)
			for i, b := range orderedBatches(n, p, total, size) {
				for attempt := 1; ; attempt++ {
					err := publish(ctx, b)
					if err == nil {
						break
					}
					v, _ := failures.LoadOrStore(p, new(int))
					if *v.(*int)++; *v.(*int) <= 3 {
						t.Logf("partition %d batch %d attempt %d: %v", p, i, attempt, err)
					}
					if ctx.Err() != nil || attempt == 50 {
						errs <- fmt.Errorf("partition %d batch %d: %w", p, i, err)
						return
					}
					time.Sleep(100 * time.Millisecond)
				}
				stored.Store(p, i+1)
				// Pace the batches so that the leader losses fall in the
				// middle of the run.
				time.Sleep(15 * time.Millisecond)
			}
		}()
	}
	progress := func() int {
		least := total
		for p := 0; p < partitions; p++ {
			v, ok := stored.Load(p)
			if !ok {
				return 0
			}
			least = min(least, v.(int)*size)
		}
		return least
	}
	waitProgress := func(at int) {
		testenv.CheckFor(t, 60*time.Second, 5*time.Millisecond, func() error {
			if got := progress(); got < at {
				return fmt.Errorf("%d of %d published", got, at)
			}
			return nil
		})
	}
	kill := func() int {
		var victim int
		testenv.CheckFor(t, 20*time.Second, 50*time.Millisecond, func() error {
			var err error
			victim, err = c.leader(ctx, js, cfg.Name)
			return err
		})
		c.Stop(victim)
		t.Logf("shut down %s, the leader of %s, at %d of %d per partition", c.Name(victim), cfg.Name, progress(), total)
		return victim
	}
	// Leader changes without a node loss: each leaves the stream without
	// a leader for a moment, while batches are in flight.
	waitProgress(total / 10)
	for i := 0; i < 8; i++ {
		_, err := js.Conn().Request("$JS.API.STREAM.LEADER.STEPDOWN."+cfg.Name, nil, 2*time.Second)
		t.Logf("stepdown of the leader of %s at %d of %d per partition (%v)", cfg.Name, progress(), total, err)
		time.Sleep(300 * time.Millisecond)
	}
	waitProgress(total * 2 / 5)
	first := kill()
	waitProgress(total / 2)
	c.Start(first)
	// A restarted node catches up before the next one goes, so a quorum
	// stays.
	current := func(node int) {
		testenv.CheckFor(t, 30*time.Second, 50*time.Millisecond, func() error {
			rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
			defer rcancel()
			st, err := js.Stream(rctx, cfg.Name)
			if err != nil {
				return err
			}
			info, err := st.Info(rctx)
			if err != nil {
				return err
			}
			if info.Cluster == nil {
				return errors.New("no cluster info")
			}
			for _, r := range info.Cluster.Replicas {
				if r.Name == c.Name(node) && r.Current {
					return nil
				}
			}
			return fmt.Errorf("%s not current yet", c.Name(node))
		})
	}
	current(first)
	waitProgress(total * 3 / 5)
	second := kill()
	wg.Wait()
	// Bring the second node back too before reading, so that the read
	// does not depend on how fast the two left elect a meta leader.
	c.Start(second)
	current(second)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	failed := map[int]int{}
	failures.Range(func(k, v any) bool { failed[k.(int)] = *v.(*int); return true })
	t.Logf("failed publishes (published again) by partition: %v", failed)
	checkOrdered(t, ctx, js, n, partitions, total)
}

// TestGroupPublisherKeepsEachCallersOrder: eight callers, each publishing
// its partition's batches one after the other, share atomic batches; every
// partition ends in order with each message once, in fewer commits than
// calls.
func TestGroupPublisherKeepsEachCallersOrder(t *testing.T) {
	ctx, js, n := validOnOneServer(t)
	const partitions, total, size = 8, 1500, 50
	g := NewGroupPublisher(js)
	var wg sync.WaitGroup
	errs := make(chan error, partitions)
	calls := 0
	for p := 0; p < partitions; p++ {
		batches := orderedBatches(n, p, total, size)
		calls += len(batches)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, b := range batches {
				if _, err := g.Publish(ctx, b); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	checkOrdered(t, ctx, js, n, partitions, total)
	if c := g.Commits(); c >= calls {
		t.Fatalf("%d commits for %d calls: nothing was grouped", c, calls)
	} else {
		t.Logf("%d calls in %d commits", calls, c)
	}
}

// TestGroupPublisherCallerLeavingKeepsTheOthersGoing: a caller whose
// context ends while it waits leaves the queue; the others finish.
func TestGroupPublisherCallerLeavingKeepsTheOthersGoing(t *testing.T) {
	ctx, js, n := validOnOneServer(t)
	g := NewGroupPublisher(js)
	const partitions, total, size = 6, 600, 20
	var wg sync.WaitGroup
	for p := 0; p < partitions; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, b := range orderedBatches(n, p, total, size) {
				// Callers of odd partitions give up on some calls at once,
				// then publish the batch again (as a redelivery would).
				if p%2 == 1 {
					gone, stop := context.WithCancel(ctx)
					stop()
					g.Publish(gone, b)
				}
				if _, err := g.Publish(ctx, b); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	checkOrdered(t, ctx, js, n, partitions, total)
}

// TestPublishInOrderOnOneServer: batches with duplicates on a
// single-replica stream end in order, each message once.
func TestPublishInOrderOnOneServer(t *testing.T) {
	ctx, js, n := validOnOneServer(t)
	dups := 0
	for p := 0; p < 3; p++ {
		for _, b := range orderedBatches(n, p, 3000, 700) {
			d, err := PublishInOrder(ctx, js, b)
			if err != nil {
				t.Fatal(err)
			}
			dups += d
		}
	}
	checkOrdered(t, ctx, js, n, 3, 3000)
	if dups == 0 {
		t.Fatal("the repeated ids were not reported as duplicates")
	}
	if d, err := PublishInOrder(ctx, js, nil); d != 0 || err != nil {
		t.Fatalf("empty batch: %d, %v", d, err)
	}
}

// validOnOneServer starts a nats-server with a single-replica VALID stream
// and returns a context bounded to a minute, a JetStream client and the
// stream names.
func validOnOneServer(t *testing.T) (context.Context, jetstream.JetStream, wire.Names) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	_, url := testenv.NATS(t)
	js := testenv.JetStream(t, url)
	n := wire.For("")
	if _, err := js.CreateStream(ctx, streamConfig(n, wire.Valid, Config{}.withDefaults())); err != nil {
		t.Fatal(err)
	}
	return ctx, js, n
}
