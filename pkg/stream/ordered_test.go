package stream

import (
	"context"
	"fmt"
	"strconv"
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

// TestGroupPublisherKeepsEachCallersOrder: eight callers, each publishing
// its partition's batches one after the other, share atomic batches; every
// partition ends in order with each message once, in fewer commits than
// calls.
func TestGroupPublisherKeepsEachCallersOrder(t *testing.T) {
	ctx, js, n := validOnOneServer(t)
	const partitions, total, size = 8, 1500, 50
	g := NewGroupPublisher(js, CommitterConfig{})
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
	g := NewGroupPublisher(js, CommitterConfig{})
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
