package stream

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// TestChainStopsAtARefusedMessage: the stream refuses one message in the
// middle of a chained run (too large for it) and would take the next ones;
// the chain keeps them out, so the stream holds exactly the messages
// before the refused one, and Commit names it as the first unconfirmed.
// Plain pipelined publishes store the rest behind the gap.
func TestChainStopsAtARefusedMessage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, url := testenv.NATS(t)
	js := testenv.JetStream(t, url)
	n := wire.For("")
	cfg := streamConfig(n, wire.Valid, Config{}.withDefaults())
	cfg.MaxMsgSize = 1024
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	msgs := orderedRange(n, 0, 1, 40)
	msgs[7].Data = []byte(strings.Repeat("x", 2048)) // the 8th
	c := NewCommitter(js, CommitterConfig{ChainIfOneReplica: wire.Valid, RetryFor: 300 * time.Millisecond})
	acks, err := c.Commit(ctx, msgs)
	if err == nil || len(acks) != 7 {
		t.Fatalf("commit with the 8th message refused: %d acks, err %v; want 7 and an error", len(acks), err)
	}
	stored := storedSeqs(t, ctx, js, n)
	if len(stored) != 7 {
		t.Errorf("the stream holds %d messages, want the 7 before the refused one: %v", len(stored), stored)
	}
	for i := 1; i <= 7; i++ {
		if _, ok := stored[fmt.Sprintf("p0-%d", i)]; !ok {
			t.Errorf("p0-%d is not stored", i)
		}
	}
}

// TestChainBesideAnotherWriter: another writer publishes to the same
// subjects all along, so its messages come between the runs' messages and
// break runs; every message of ours is stored once, in order per subject,
// each ack names the sequence the stream holds it at, and the commits
// were chained (a one-replica stream named by ChainIfOneReplica).
func TestChainBesideAnotherWriter(t *testing.T) {
	const partitions, total, size = 4, 2000, 250
	ctx, js, n := validOnOneServer(t)
	stop := make(chan struct{})
	var others atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			m := NewMsg(n.Subject(wire.Valid, i%partitions), fmt.Sprintf("other-%d", i), []byte("other"))
			m.Header.Set(wire.HdrRawSeq, "0")
			if _, err := js.PublishMsg(ctx, m); err == nil {
				others.Add(1)
			}
		}
	}()
	var msgs []*nats.Msg
	for seq := 1; seq <= total; seq++ {
		for p := 0; p < partitions; p++ {
			msgs = append(msgs, orderedMsg(n, p, seq))
		}
	}
	c := NewCommitter(js, CommitterConfig{ChainIfOneReplica: wire.Valid})
	var acks []Ack
	for i := 0; i < len(msgs); i += size {
		a, err := c.Commit(ctx, msgs[i:min(len(msgs), i+size)])
		if err != nil {
			t.Fatal(err)
		}
		acks = append(acks, a...)
	}
	close(stop)
	wg.Wait()
	if !c.Chained() {
		t.Fatal("the committer did not chain its runs on a one-replica stream")
	}
	if others.Load() < 100 {
		t.Fatalf("the other writer stored only %d messages meanwhile", others.Load())
	}
	stored := storedSeqs(t, ctx, js, n)
	for i, a := range acks {
		id := msgs[i].Header.Get(jetstream.MsgIDHeader)
		if stored[id] != a.Seq || a.Duplicate {
			t.Fatalf("ack %d: %s at %d (duplicate %v), the stream has it at %d", i, id, a.Seq, a.Duplicate, stored[id])
		}
	}
	// Ours in order per subject, each once; the other writer's carry 0.
	got := map[string][]int{}
	if err := ReadAll(ctx, js, n.Stream(wire.Valid), func(m jetstream.Msg) error {
		if s := m.Headers().Get(wire.HdrRawSeq); s != "0" {
			var v int
			fmt.Sscan(s, &v)
			got[m.Subject()] = append(got[m.Subject()], v)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for p := 0; p < partitions; p++ {
		seqs := got[n.Subject(wire.Valid, p)]
		if len(seqs) != total {
			t.Fatalf("partition %d: %d of ours stored, want %d", p, len(seqs), total)
		}
		for i, s := range seqs {
			if s != i+1 {
				t.Fatalf("partition %d: position %d holds %d", p, i, s)
			}
		}
	}
	t.Logf("%d messages of ours beside %d of another writer", len(acks), others.Load())
}

// TestChainReportsAnotherWritersCopyDuplicate: another writer stores one
// of the messages of a chained run after the Committer last heard from
// the stream; the run is broken there (unsure), sent again asking for
// every ack, and that message is answered a duplicate (RAW held it
// already) while the ones the broken run itself stored are answered new.
func TestChainReportsAnotherWritersCopyDuplicate(t *testing.T) {
	ctx, js, n := validOnOneServer(t)
	c := NewCommitter(js, CommitterConfig{ChainIfOneReplica: wire.Valid})
	if _, err := c.Commit(ctx, orderedRange(n, 0, 1, 2)); err != nil {
		t.Fatal(err)
	}
	other, err := js.PublishMsg(ctx, orderedMsg(n, 0, 5))
	if err != nil {
		t.Fatal(err)
	}
	msgs := orderedRange(n, 0, 3, 7)
	acks, err := c.Commit(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	stored := storedSeqs(t, ctx, js, n)
	for i, a := range acks {
		id := msgs[i].Header.Get(jetstream.MsgIDHeader)
		if want := id == "p0-5"; a.Duplicate != want || a.Seq != stored[id] {
			t.Errorf("%s: ack at %d duplicate %v; stored at %d, duplicate wanted %v", id, a.Seq, a.Duplicate, stored[id], want)
		}
	}
	if acks[2].Seq != other.Sequence {
		t.Errorf("the other writer's p0-5 is at %d, the ack says %d", other.Sequence, acks[2].Seq)
	}
}
