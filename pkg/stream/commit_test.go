package stream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// commitFunc stores msgs in order and returns the acks of the confirmed
// head: the contract of Committer.Commit that the cases below hold an
// implementation to.
type commitFunc func(ctx context.Context, msgs []*nats.Msg) ([]Ack, error)

// newCommitFunc builds the implementation under test over js with cfg.
type newCommitFunc func(t *testing.T, js jetstream.JetStream, cfg CommitterConfig) commitFunc

// commitContract is the contract suite of an ordered atomic-batch
// committer, in the shape of watermill's pubsub/tests: a table of cases,
// each run with the constructor of the implementation under test.
var commitContract = []struct {
	name string
	run  func(t *testing.T, newCommit newCommitFunc)
}{
	{"DropsDuplicatesInOrder", testCommitDropsDuplicatesInOrder},
	{"AcksCarrySequences", testCommitAcksCarrySequences},
	{"NeedsEnsure", testCommitNeedsEnsure},
	{"OrderAcrossServerRestarts", testCommitOrderAcrossRestarts},
	{"OrderThroughLeaderLoss", testCommitOrderThroughLeaderLoss},
	{"QuorumLostNamesFirstUnconfirmed", testCommitQuorumLost},
}

// runCommitContract runs every case of the contract against newCommit,
// but those named in skip (with the reason).
func runCommitContract(t *testing.T, newCommit newCommitFunc, skip map[string]string) {
	for _, c := range commitContract {
		t.Run(c.name, func(t *testing.T) {
			if why, ok := skip[c.name]; ok {
				t.Skip(why)
			}
			c.run(t, newCommit)
		})
	}
}

// TestCommitter holds Committer, the one committer of ingest and the
// validator, to the contract.
func TestCommitter(t *testing.T) {
	runCommitContract(t, func(_ *testing.T, js jetstream.JetStream, cfg CommitterConfig) commitFunc {
		return NewCommitter(js, cfg).Commit
	}, nil)
}

// TestCommitterChainIfOneReplica holds a Committer that chains its runs on
// a one-replica stream (ingest's to RAW) to the same contract: chained on
// the one-server cases, atomic batches on the cluster's.
func TestCommitterChainIfOneReplica(t *testing.T) {
	runCommitContract(t, func(_ *testing.T, js jetstream.JetStream, cfg CommitterConfig) commitFunc {
		cfg.ChainIfOneReplica = wire.Valid
		return NewCommitter(js, cfg).Commit
	}, map[string]string{
		"NeedsEnsure": "chained runs need no atomic batch publish",
		// On a replicated stream this Committer is TestCommitter's: the
		// same atomic batches, whose run of this case covers them;
		// QuorumLostNamesFirstUnconfirmed checks here that a replicated
		// stream is not chained.
		"OrderThroughLeaderLoss": "a replicated stream takes the atomic batches TestCommitter's run of this case covers",
	})
}

// testCommitDropsDuplicatesInOrder: ids already stored (a redelivered
// batch after a crash, with a committer that knows nothing of them), ids
// repeated within a batch, and more messages than one atomic batch holds;
// the stream ends with every message once, in order.
func testCommitDropsDuplicatesInOrder(t *testing.T, newCommit newCommitFunc) {
	ctx, js, n := validOnOneServer(t)
	first := newCommit(t, js, CommitterConfig{})
	if dups, err := commitCounting(ctx, first, orderedRange(n, 0, 1, 300)); err != nil || dups != 0 {
		t.Fatalf("first batch: %d dups, %v", dups, err)
	}
	// The same committer leaves out what it stored (no round trip).
	if dups, err := commitCounting(ctx, first, orderedRange(n, 0, 250, 320)); err != nil || dups != 51 {
		t.Fatalf("overlapping batch: %d dups, %v", dups, err)
	}
	// A new committer (a restarted validator) learns of them from the
	// server: the batch is refused and split until the stored ids stand
	// alone, and everything else is stored in order.
	mixed := orderedRange(n, 0, 200, 330)
	mixed = append(mixed, orderedMsg(n, 0, 331), orderedMsg(n, 0, 331), orderedMsg(n, 0, 5))
	mixed = append(mixed, orderedRange(n, 0, 332, 2600)...) // more than AtomicBatchMax
	dups, err := commitCounting(ctx, newCommit(t, js, CommitterConfig{}), mixed)
	if err != nil {
		t.Fatal(err)
	}
	if want := 121 + 1 + 1; dups != want {
		t.Fatalf("%d duplicates, want %d", dups, want)
	}
	checkOrdered(t, ctx, js, n, 1, 2600)
}

// testCommitAcksCarrySequences: every ack names the stream sequence its
// message is stored at (the original's for a duplicate), and the new ones
// go up; committed again by a new committer, every message comes back a
// duplicate with its original sequence and the stream is unchanged.
func testCommitAcksCarrySequences(t *testing.T, newCommit newCommitFunc) {
	ctx, js, n := validOnOneServer(t)
	var msgs []*nats.Msg
	for p := 0; p < 2; p++ {
		for _, b := range orderedBatches(n, p, 1000, 300) {
			msgs = append(msgs, b...)
		}
	}
	check := func(what string, acks []Ack, wantDups bool) {
		t.Helper()
		if len(acks) != len(msgs) {
			t.Fatalf("%s: %d acks for %d messages", what, len(acks), len(msgs))
		}
		stored := storedSeqs(t, ctx, js, n)
		var last uint64
		dups := 0
		for i, a := range acks {
			id := msgs[i].Header.Get(jetstream.MsgIDHeader)
			if want, ok := stored[id]; !ok || want != a.Seq {
				t.Fatalf("%s: ack %d: %s at sequence %d, the stream has it at %d (stored: %v)", what, i, id, a.Seq, want, ok)
			}
			if a.Duplicate {
				dups++
				continue
			}
			if a.Seq <= last {
				t.Fatalf("%s: ack %d: %s stored at %d, after %d", what, i, id, a.Seq, last)
			}
			last = a.Seq
		}
		if all := dups == len(acks); dups == 0 || all != wantDups {
			t.Fatalf("%s: %d of %d acks are duplicates", what, dups, len(acks))
		}
	}
	acks, err := newCommit(t, js, CommitterConfig{})(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	check("first commit", acks, false)
	acks, err = newCommit(t, js, CommitterConfig{})(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	check("committed again", acks, true)
	checkOrdered(t, ctx, js, n, 2, 1000)
}

// testCommitNeedsEnsure: a VALID stream created before atomic batches were
// turned on refuses them with a clear error, and Ensure updates it so that
// they are accepted.
func testCommitNeedsEnsure(t *testing.T, newCommit newCommitFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, url := testenv.NATS(t)
	js := testenv.JetStream(t, url)
	n := wire.For("")
	old := streamConfig(n, wire.Valid, Config{}.withDefaults())
	old.AllowAtomicPublish = false
	if _, err := js.CreateStream(ctx, old); err != nil {
		t.Fatal(err)
	}
	commit := newCommit(t, js, CommitterConfig{})
	_, err := commit(ctx, []*nats.Msg{orderedMsg(n, 0, 1), orderedMsg(n, 0, 2)})
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != ErrCodeBatchDisabled || !strings.Contains(err.Error(), "Ensure") {
		t.Fatalf("publish to a stream without atomic publish: %v", err)
	}
	if err := Ensure(ctx, js, n, Config{}); err != nil {
		t.Fatal(err)
	}
	if _, err := commit(ctx, []*nats.Msg{orderedMsg(n, 0, 1), orderedMsg(n, 0, 2)}); err != nil {
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
	if _, err := newCommit(t, js, CommitterConfig{})(ctx, copies[:1]); err != nil {
		t.Fatalf("publishing a copy again in order: %v", err)
	}
}

// testCommitOrderAcrossRestarts restarts nats-server three times while
// four partitions' messages are committed, each failed commit re-sent from
// its first unconfirmed message; every partition must hold each message
// once, in order. Once with the client's reconnect buffer off (as
// receiptctl connects) and once with the nats.go default buffer.
func testCommitOrderAcrossRestarts(t *testing.T, newCommit newCommitFunc) {
	const partitions, total, size, restarts = 4, 3000, 100, 3
	for _, tc := range []struct {
		name    string
		bufSize int
	}{{"no-reconnect-buffer", -1}, {"reconnect-buffer", nats.DefaultReconnectBufSize}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			s, url := testenv.NATS(t)
			nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond), nats.ReconnectBufSize(tc.bufSize))
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			n := wire.For("")
			if _, err := js.CreateStream(ctx, streamConfig(n, wire.Valid, Config{}.withDefaults())); err != nil {
				t.Fatal(err)
			}
			var msgs []*nats.Msg
			for seq := 1; seq <= total; seq++ {
				for p := 0; p < partitions; p++ {
					msgs = append(msgs, orderedMsg(n, p, seq))
				}
			}
			var confirmed atomic.Int64
			done := make(chan error, 1)
			go func() {
				commit := newCommit(t, js, CommitterConfig{})
				for len(msgs) > 0 {
					part := msgs[:min(size, len(msgs))]
					acks, err := commit(ctx, part)
					msgs = msgs[len(acks):]
					confirmed.Add(int64(len(acks)))
					if err != nil && ctx.Err() != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			restartWhileCommitting(t, s, restarts, partitions*total, &confirmed)
			if err := <-done; err != nil {
				t.Fatalf("commit with %d restarts: %v", restarts, err)
			}
			checkOrdered(t, ctx, js, n, partitions, total)
		})
	}
}

// restartWhileCommitting restarts s each time another of restarts+1 equal
// shares of total messages is confirmed.
func restartWhileCommitting(t *testing.T, s *server.Server, restarts, total int, confirmed *atomic.Int64) {
	t.Helper()
	for r := 1; r <= restarts; r++ {
		at := int64(total * r / (restarts + 1))
		testenv.CheckFor(t, time.Minute, 5*time.Millisecond, func() error {
			if got := confirmed.Load(); got < at {
				return fmt.Errorf("%d of %d confirmed", got, at)
			}
			return nil
		})
		s = testenv.RestartNATS(t, s)
		t.Logf("restarted the server at %d of %d confirmed", confirmed.Load(), total)
	}
}

// testCommitOrderThroughLeaderLoss: four partitions commit batches to an
// R3 VALID while its leader steps down eight times and is then shut down
// twice (the first node is back before the second goes). Every failed
// batch is committed again, as after a validator restart. Each partition
// must hold every message once, in order. The same run with PublishAll
// (the old validator) breaks the order (ordered_demo_test.go): nats.go
// retries a publish answered "no responders" while later ones of its batch
// are stored.
//
// A batch can stall for up to the stream's duplicate window: nats-server
// 2.15.2 stages an atomic batch's message ids before it commits, and on a
// leader change clears only the staged ids at the end of its dedupe list
// (processStreamLeaderChange), so an id staged by an attempt the change
// lost, with stored ids after it, answers every retry 10158 "duplicate
// message id is in process" until the window expires it. CI met it once
// (1,000 of 3,200 for over 60 s). VALID here keeps a 60 s window (above
// the Committer's 30 s DuplicateTrust), and the progress waits allow it.
func testCommitOrderThroughLeaderLoss(t *testing.T, newCommit newCommitFunc) {
	const partitions, total, size = 4, 8000, 200
	const dupWindow = time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c, js, cfg := validOnCluster(t, ctx)
	cfg.Duplicates = dupWindow
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	n := wire.For("")

	var stored sync.Map // partition -> batches done
	var failures sync.Map
	var wg sync.WaitGroup
	errs := make(chan error, partitions)
	for p := 0; p < partitions; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			commit := newCommit(t, js, CommitterConfig{})
			for i, b := range orderedBatches(n, p, total, size) {
				for attempt := 1; ; attempt++ {
					_, err := commit(ctx, b)
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
		testenv.CheckFor(t, dupWindow+30*time.Second, 5*time.Millisecond, func() error {
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
			victim, err = streamLeader(ctx, c, js, cfg.Name)
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
	waitCurrent(t, ctx, c, js, cfg.Name, first)
	waitProgress(total * 3 / 5)
	second := kill()
	wg.Wait()
	// Bring the second node back too before reading, so that the read
	// does not depend on how fast the two left elect a meta leader.
	c.Start(second)
	waitCurrent(t, ctx, c, js, cfg.Name, second)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	failed := map[int]int{}
	failures.Range(func(k, v any) bool { failed[k.(int)] = *v.(*int); return true })
	t.Logf("failed publishes (published again) by partition: %v", failed)
	checkOrdered(t, ctx, js, n, partitions, total)
}

// testCommitQuorumLost stops two of the three nodes of an R3 VALID while
// messages are committed: no quorum is left, so a commit must fail, its
// acks naming a confirmed head that the stream holds at those sequences.
// With the nodes back, committing everything again from the start
// completes the stream exactly (what was stored comes back as duplicates).
func testCommitQuorumLost(t *testing.T, newCommit newCommitFunc) {
	const partitions, total, size, stopAt = 2, 3000, 200, 2000
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, js, _ := validOnCluster(t, ctx)
	n := wire.For("")
	var msgs []*nats.Msg
	for seq := 1; seq <= total; seq++ {
		for p := 0; p < partitions; p++ {
			msgs = append(msgs, orderedMsg(n, p, seq))
		}
	}
	commit := newCommit(t, js, CommitterConfig{RetryFor: 2 * time.Second})
	confirmed := map[string]uint64{}
	var err error
	for next := 0; err == nil; {
		if next >= partitions*total {
			t.Fatal("every message was confirmed with two of three nodes stopped")
		}
		if next >= stopAt && c.Running(0) {
			c.Stop(0)
			c.Stop(1)
		}
		var acks []Ack
		acks, err = commit(ctx, msgs[next:min(next+size, len(msgs))])
		for i, a := range acks {
			confirmed[msgs[next+i].Header.Get(jetstream.MsgIDHeader)] = a.Seq
		}
		next += len(acks)
	}
	if len(confirmed) < stopAt {
		t.Fatalf("%d messages confirmed before the nodes were stopped, want at least %d", len(confirmed), stopAt)
	}
	t.Logf("with two nodes stopped, after %d confirmed: %v", len(confirmed), err)

	c.Start(0)
	c.Start(1)
	testenv.CheckFor(t, 60*time.Second, 200*time.Millisecond, func() error {
		_, err := streamLeader(ctx, c, js, n.Stream(wire.Valid))
		return err
	})
	stored := storedSeqs(t, ctx, js, n)
	for id, seq := range confirmed {
		if stored[id] != seq {
			t.Fatalf("%s confirmed at sequence %d, the stream has it at %d", id, seq, stored[id])
		}
	}
	if _, err := newCommit(t, js, CommitterConfig{})(ctx, msgs); err != nil {
		t.Fatalf("commit again with the nodes back: %v", err)
	}
	checkOrdered(t, ctx, js, n, partitions, total)
}

// commitCounting commits msgs and returns how many were duplicates.
func commitCounting(ctx context.Context, commit commitFunc, msgs []*nats.Msg) (int, error) {
	acks, err := commit(ctx, msgs)
	return duplicates(acks), err
}

// orderedRange is messages from..to of partition p.
func orderedRange(n wire.Names, p, from, to int) []*nats.Msg {
	var out []*nats.Msg
	for seq := from; seq <= to; seq++ {
		out = append(out, orderedMsg(n, p, seq))
	}
	return out
}

// storedSeqs reads VALID and returns every message's stream sequence by id.
func storedSeqs(t *testing.T, ctx context.Context, js jetstream.JetStream, n wire.Names) map[string]uint64 {
	t.Helper()
	var seqs map[string]uint64
	testenv.CheckFor(t, 30*time.Second, 200*time.Millisecond, func() error {
		seqs = map[string]uint64{}
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return ReadAll(actx, js, n.Stream(wire.Valid), func(m jetstream.Msg) error {
			meta, err := m.Metadata()
			if err == nil {
				seqs[m.Headers().Get(jetstream.MsgIDHeader)] = meta.Sequence.Stream
			}
			return err
		})
	})
	return seqs
}

// validOnCluster starts three routed nats-servers with an R3 VALID and
// returns them, a client reconnecting for ever, and VALID's config.
func validOnCluster(t *testing.T, ctx context.Context) (*testenv.Cluster, jetstream.JetStream, jetstream.StreamConfig) {
	t.Helper()
	c := testenv.NewCluster(t, "ordered", 3, nil)
	nc, err := nats.Connect(c.URLs(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(8192), jetstream.WithPublishAsyncTimeout(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	cfg := streamConfig(wire.For(""), wire.Valid, Config{Replicas: 3}.withDefaults())
	testenv.CheckFor(t, 20*time.Second, 100*time.Millisecond, func() error {
		_, err := js.CreateStream(ctx, cfg)
		return err
	})
	return c, js, cfg
}

// streamLeader is the index of the running server leading stream name.
func streamLeader(ctx context.Context, c *testenv.Cluster, js jetstream.JetStream, name string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
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

// waitCurrent waits until node is a current replica of stream name.
func waitCurrent(t *testing.T, ctx context.Context, c *testenv.Cluster, js jetstream.JetStream, name string, node int) {
	t.Helper()
	testenv.CheckFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		defer rcancel()
		st, err := js.Stream(rctx, name)
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

// TestCommitMarksSubjectLasts: with SubjectLasts, the stored commit
// message of every atomic batch names where each subject's messages of
// the batch end; the batch is stored whole at consecutive sequences, so
// the commit's sequence and position place every subject's last message.
// A plain publish of a message read back carries none of it.
func TestCommitMarksSubjectLasts(t *testing.T) {
	ctx, js, n := validOnOneServer(t)
	c := NewCommitter(js, CommitterConfig{BatchMax: 7, SubjectLasts: true})
	// Partitions 0, 1, 2 interleaved, 1 ending early; 3 batches of 7 and
	// one of 4 (25 messages).
	var msgs []*nats.Msg
	for seq := 1; seq <= 10; seq++ {
		msgs = append(msgs, orderedMsg(n, 0, seq))
		if seq <= 3 {
			msgs = append(msgs, orderedMsg(n, 1, seq))
		}
		if seq%2 == 0 {
			msgs = append(msgs, orderedMsg(n, 2, seq))
		}
	}
	if len(msgs) != 18 {
		t.Fatalf("%d messages", len(msgs))
	}
	acks, err := c.Commit(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	subjectAt := map[uint64]string{}
	for i, a := range acks {
		subjectAt[a.Seq] = msgs[i].Subject
	}
	commits := 0
	if err := ReadAll(ctx, js, n.Stream(wire.Valid), func(m jetstream.Msg) error {
		meta, err := m.Metadata()
		if err != nil {
			return err
		}
		v := m.Headers().Get(wire.HdrBatchLasts)
		if m.Headers().Get(wire.HdrBatchCommit) != "1" {
			if v != "" {
				t.Errorf("seq %d: %s on a message that is not a commit", meta.Sequence.Stream, v)
			}
			return nil
		}
		commits++
		size, err := strconv.Atoi(m.Headers().Get(wire.HdrBatchSeq))
		if err != nil {
			return err
		}
		lasts, err := wire.ParseBatchLasts(v, size)
		if err != nil {
			return err
		}
		// Recompute each subject's last position in the stored batch.
		first := meta.Sequence.Stream - uint64(size) + 1
		want := map[string]int{}
		for seq := first; seq <= meta.Sequence.Stream; seq++ {
			want[subjectAt[seq]] = int(seq-first) + 1
		}
		if fmt.Sprint(lasts) != fmt.Sprint(want) {
			t.Errorf("batch ending at %d: %s says %v, the stream holds %v", meta.Sequence.Stream, wire.HdrBatchLasts, lasts, want)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if commits != 3 {
		t.Fatalf("%d commits of 18 messages in batches of 7, want 3", commits)
	}
	// Published again plainly, a read-back commit loses the batch headers.
	var back *nats.Msg
	if err := ReadAll(ctx, js, n.Stream(wire.Valid), func(m jetstream.Msg) error {
		if m.Headers().Get(wire.HdrBatchLasts) != "" && back == nil {
			back = &nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if plain := withoutBatchHeaders(back); plain.Header.Get(wire.HdrBatchLasts) != "" || plain.Header.Get(wire.HdrBatchCommit) != "" {
		t.Fatalf("a plain publish would keep %v", plain.Header)
	}
}

func TestParseBatchLastsRefusesNonsense(t *testing.T) {
	for _, v := range []string{"1", "2 a 1 b", "0 a", "5 a", "1 a 2 a", "x a"} {
		if _, err := wire.ParseBatchLasts(v, 4); err == nil {
			t.Errorf("%q accepted", v)
		}
	}
	if got, err := wire.ParseBatchLasts(wire.FormatBatchLasts([]string{"a", "b", "a", "c"}), 4); err != nil || fmt.Sprint(got) != "map[a:3 b:2 c:4]" {
		t.Fatalf("round trip: %v, %v", got, err)
	}
}
