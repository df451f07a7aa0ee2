package lease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

const (
	testP   = 8
	testTTL = 2 * time.Second
)

// bed is a NATS server with the lease bucket, and a record of every write
// to it in order (headers included). The record comes from the bucket
// stream's RePublish, not from a consumer: with History 1 a later write
// to a key removes the one before it, so a consumer that lags skips a
// write (a release between two holders) that did happen. Every
// republished message names the key's previous sequence, so a write the
// record missed would fail the test (gaps) instead of passing unseen.
type bed struct {
	t      *testing.T
	url    string
	js     jetstream.JetStream
	bucket string
	mu     sync.Mutex
	writes []write
	last   map[string]uint64 // per key, the last recorded sequence
	gaps   []string
}

// write is one message of the lease bucket's stream.
type write struct {
	seq    uint64
	key    string
	holder string // "" for a marker (release, expiry)
	reason string // a marker's: PURGE (a release) or MaxAge (an expiry)
}

// recordPrefix is where the bed's bucket republishes what it stores.
const recordPrefix = "leasetest"

func newBed(t *testing.T) *bed {
	_, url := testenv.NATS(t)
	js := testenv.JetStream(t, url)
	n := wire.For("")
	ctx := context.Background()
	if err := stream.Ensure(ctx, js, n, stream.Config{}); err != nil {
		t.Fatal(err)
	}
	b := &bed{t: t, url: url, js: js, bucket: n.LeaseBucket(), last: map[string]uint64{}}
	nc := testenv.JetStream(t, url).Conn()
	sub, err := nc.Subscribe(recordPrefix+".>", b.record)
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, "KV_"+b.bucket)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.RePublish = &jetstream.RePublish{Source: ">", Destination: recordPrefix + ".>"}
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, g := range b.gaps {
			t.Errorf("the record of the lease bucket missed a write: %s", g)
		}
	})
	return b
}

// record appends one republished write of the bucket.
func (b *bed) record(m *nats.Msg) {
	seq, _ := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
	prev, _ := strconv.ParseUint(m.Header.Get(jetstream.LastSequenceHeader), 10, 64)
	w := write{seq: seq, key: strings.TrimPrefix(m.Header.Get(jetstream.SubjectHeader), "$KV."+b.bucket+".")}
	if op := m.Header.Get("KV-Operation"); op != "" {
		w.reason = op
	} else if r := m.Header.Get(jetstream.MarkerReasonHeader); r != "" {
		w.reason = r
	} else {
		var v leaseValue
		if jsonErr := json.Unmarshal(m.Data, &v); jsonErr == nil {
			w.holder = v.Holder
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	// prev is the key's last message still stored when this one was: a
	// message removed since (a marker's TTL, a rollup) may come before it.
	if prev > b.last[w.key] {
		b.gaps = append(b.gaps, fmt.Sprintf("%s: revision %d follows %d, the record's last is %d", w.key, seq, prev, b.last[w.key]))
	}
	b.last[w.key] = seq
	b.writes = append(b.writes, w)
}

// mark returns the bucket's last revision.
func (b *bed) mark() uint64 {
	b.t.Helper()
	s, err := b.js.Stream(context.Background(), "KV_"+b.bucket)
	if err != nil {
		b.t.Fatal(err)
	}
	return s.CachedInfo().State.LastSeq
}

// member is a Group run as the daemon runs it: on Changed it releases
// the excess at once (a service with nothing to drain).
type member struct {
	g      *Group
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	epochs map[int][]uint64 // every epoch Owned reported per partition
}

func (b *bed) join(id string) *member {
	b.t.Helper()
	g, err := Join(context.Background(), testenv.JetStream(b.t, b.url), Config{Bucket: b.bucket, Kind: "windower", ID: id, Partitions: testP, TTL: testTTL})
	if err != nil {
		b.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{g: g, cancel: cancel, done: make(chan struct{}), epochs: map[int][]uint64{}}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = g.Run(ctx) }()
	go func() {
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case <-g.Changed():
			}
			if ex := g.Excess(); len(ex) > 0 {
				_ = g.Release(ctx, ex...)
			}
			m.note()
		}
	}()
	go func() { wg.Wait(); close(m.done) }()
	b.t.Cleanup(func() { m.stop() })
	return m
}

// note records the epochs Owned reports.
func (m *member) note() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for p, e := range m.g.Owned() {
		if es := m.epochs[p]; len(es) == 0 || es[len(es)-1] != e {
			m.epochs[p] = append(es, e)
		}
	}
}

// stop ends Run without releasing anything (a stalled or killed member).
func (m *member) stop() { m.cancel(); <-m.done }

// settled returns nil when ms own every partition once between them
// and none more than ceil(P/len(ms)).
func settled(ms ...*member) error {
	seen := map[int]string{}
	for _, m := range ms {
		own := m.g.Owned()
		if len(own) > ceilDiv(testP, len(ms)) {
			return fmt.Errorf("%s owns %d partitions, more than ceil(%d/%d)", m.g.ID(), len(own), testP, len(ms))
		}
		for p := range own {
			if o, ok := seen[p]; ok {
				return fmt.Errorf("partition %d owned by %s and %s", p, o, m.g.ID())
			}
			seen[p] = m.g.ID()
		}
	}
	if len(seen) != testP {
		return fmt.Errorf("%d of %d partitions owned: %v", len(seen), testP, seen)
	}
	return nil
}

// checkHistory asserts on every write of the bucket so far: a lease is
// taken only when it has no holder (never two owners of one partition),
// and the epochs of successive owners grow. It returns the markers that
// ended a holding after revision from, by reason.
func (b *bed) checkHistory(from uint64) map[string]int {
	b.t.Helper()
	last := b.mark()
	testenv.CheckFor(b.t, wait, 10*time.Millisecond, func() error {
		b.mu.Lock()
		defer b.mu.Unlock()
		if n := len(b.writes); n == 0 || b.writes[n-1].seq < last {
			return fmt.Errorf("recorded %d writes, the bucket is at revision %d", n, last)
		}
		return nil
	})
	b.mu.Lock()
	defer b.mu.Unlock()
	holder := map[string]string{}
	epoch := map[string]uint64{}
	ended := map[string]int{}
	for _, w := range b.writes {
		if !strings.Contains(w.key, ".lease.") {
			continue
		}
		switch h := holder[w.key]; {
		case w.holder == "":
			if h != "" && w.seq > from {
				ended[w.reason]++
			}
			holder[w.key] = ""
		case h == "":
			if w.seq <= epoch[w.key] {
				b.t.Errorf("%s taken at revision %d after an owner with epoch %d", w.key, w.seq, epoch[w.key])
			}
			holder[w.key], epoch[w.key] = w.holder, w.seq
		case h != w.holder:
			b.t.Errorf("%s written by %s at revision %d while %s holds it", w.key, w.holder, w.seq, h)
		}
	}
	return ended
}

// checkEpochs asserts the epochs each member saw per partition grow.
func checkEpochs(t *testing.T, ms ...*member) {
	t.Helper()
	for _, m := range ms {
		m.note()
		m.mu.Lock()
		for p, es := range m.epochs {
			if !slices.IsSorted(es) || len(slices.Compact(slices.Clone(es))) != len(es) {
				t.Errorf("%s: epochs of partition %d do not grow: %v", m.g.ID(), p, es)
			}
		}
		m.mu.Unlock()
	}
}

// wait is the longest a condition below may take; every one is bounded by
// a few lease periods when the mechanism works.
const wait = 6 * testTTL

// TestFairShare: n = 1..4 members of one group share P = 8 partitions,
// each owned once and none more than ceil(P/n).
func TestFairShare(t *testing.T) {
	for n := 1; n <= 4; n++ {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			b := newBed(t)
			var ms []*member
			for i := range n {
				ms = append(ms, b.join(fmt.Sprintf("m%d", i)))
			}
			testenv.CheckFor(t, wait, 50*time.Millisecond, func() error { return settled(ms...) })
			b.checkHistory(0)
			checkEpochs(t, ms...)
		})
	}
}

// TestJoinEvensOut: a member joining a settled group of two gets its share
// within two lease periods (the bound of docs/spec.md §9).
func TestJoinEvensOut(t *testing.T) {
	b := newBed(t)
	a, c := b.join("a"), b.join("c")
	testenv.CheckFor(t, wait, 50*time.Millisecond, func() error { return settled(a, c) })
	d := b.join("d")
	testenv.CheckFor(t, 2*testTTL, 20*time.Millisecond, func() error { return settled(a, c, d) })
	b.checkHistory(0)
	checkEpochs(t, a, c, d)
}

// TestLeaveHandsOver: a member that leaves releases its leases, and the
// others take them from the release, not from an expiry.
func TestLeaveHandsOver(t *testing.T) {
	b := newBed(t)
	a, c := b.join("a"), b.join("c")
	testenv.CheckFor(t, wait, 50*time.Millisecond, func() error { return settled(a, c) })
	from := b.mark()
	a.stop()
	if err := a.g.Leave(context.Background()); err != nil {
		t.Fatal(err)
	}
	if own := a.g.Owned(); len(own) != 0 {
		t.Errorf("after Leave, Owned = %v", own)
	}
	testenv.CheckFor(t, wait, 20*time.Millisecond, func() error { return settled(c) })
	ended := b.checkHistory(from)
	if ended["MaxAge"] != 0 || ended["PURGE"] != testP/2 {
		t.Errorf("holdings ended by %v, want %d releases (PURGE) and no expiry (MaxAge)", ended, testP/2)
	}
	checkEpochs(t, c)
}

// TestStalledMemberLosesItsPartitions: a member that stops renewing
// (killed, stopped) loses its partitions when their TTL expires; it stops
// counting them as owned by then, and the others take them over.
func TestStalledMemberLosesItsPartitions(t *testing.T) {
	b := newBed(t)
	a, c := b.join("a"), b.join("c")
	testenv.CheckFor(t, wait, 50*time.Millisecond, func() error { return settled(a, c) })
	before := a.g.Owned()
	from := b.mark()
	a.stop()
	testenv.CheckFor(t, wait, 20*time.Millisecond, func() error {
		if own := a.g.Owned(); len(own) != 0 {
			return fmt.Errorf("the stalled member still counts %v as owned", own)
		}
		return settled(c)
	})
	ended := b.checkHistory(from)
	if ended["MaxAge"] != len(before) {
		t.Errorf("holdings ended by %v, want %d expiries (MaxAge)", ended, len(before))
	}
	for p, e := range c.g.Owned() {
		if old, ok := before[p]; ok && e <= old {
			t.Errorf("partition %d: successor's epoch %d not above the stalled owner's %d", p, e, old)
		}
	}
	checkEpochs(t, c)
}

// TestChurn: members join, leave and stall in turn; the history never
// shows two owners of a partition and every member's epochs grow.
func TestChurn(t *testing.T) {
	b := newBed(t)
	live := []*member{b.join("a"), b.join("b")}
	all := slices.Clone(live)
	for i, step := range []string{"join", "leave", "join", "stall", "join"} {
		testenv.CheckFor(t, wait, 20*time.Millisecond, func() error { return settled(live...) })
		switch step {
		case "join":
			m := b.join(fmt.Sprintf("j%d", i))
			live, all = append(live, m), append(all, m)
		case "leave":
			live[0].stop()
			if err := live[0].g.Leave(context.Background()); err != nil {
				t.Fatal(err)
			}
			live = live[1:]
		case "stall":
			live[0].stop()
			live = live[1:]
		}
	}
	testenv.CheckFor(t, wait, 20*time.Millisecond, func() error { return settled(live...) })
	b.checkHistory(0)
	checkEpochs(t, all...)
}

// TestReleaseMarkerOutlivesTheTTL: a release's marker stays in the bucket
// longer than a lease period, so a watcher that lags by more than the TTL
// (another member, the dashboard, a history reader) still sees the
// partition freed instead of holding on to the holder it last saw.
func TestReleaseMarkerOutlivesTheTTL(t *testing.T) {
	b := newBed(t)
	a := b.join("a")
	testenv.CheckFor(t, wait, 50*time.Millisecond, func() error { return settled(a) })
	a.stop()
	if err := a.g.Leave(context.Background()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(testTTL + testTTL/2) // a watcher stalled past the TTL
	kv, err := b.js.KeyValue(context.Background(), b.bucket)
	if err != nil {
		t.Fatal(err)
	}
	for p := range testP {
		e, err := kv.Get(context.Background(), LeaseKey("windower", p))
		if !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Fatalf("lease %d after the release: %v, %v", p, e, err)
		}
		// The marker itself is still in the stream: the last message of
		// the key's subject.
		s, err := b.js.Stream(context.Background(), "KV_"+b.bucket)
		if err != nil {
			t.Fatal(err)
		}
		m, err := s.GetLastMsgForSubject(context.Background(), "$KV."+b.bucket+"."+LeaseKey("windower", p))
		if err != nil {
			t.Fatalf("lease %d: the release's marker is gone after %s: %v", p, testTTL+testTTL/2, err)
		}
		if op := m.Header.Get("KV-Operation"); op != "PURGE" {
			t.Fatalf("lease %d: last message %q, want the release's PURGE marker", p, op)
		}
	}
}

// TestLostAckIsNotALostLease: a renewal the server stored but whose ack
// never came (a timeout, a cancelled context, a cut connection) leaves the
// member with an older revision than the key's. Its lease is still its own:
// Leave must release it at once, not leave it to expire a TTL later while
// the others wait.
func TestLostAckIsNotALostLease(t *testing.T) {
	b := newBed(t)
	a := b.join("a")
	testenv.CheckFor(t, wait, 20*time.Millisecond, func() error { return settled(a) })
	a.stop()
	ctx := context.Background()
	kv, err := b.js.KeyValue(ctx, b.bucket)
	if err != nil {
		t.Fatal(err)
	}
	// The renewal of partition 3 whose ack was lost: stored by the
	// server, unknown to the member.
	if _, err := b.renewBehind(kv, LeaseKey("windower", 3)); err != nil {
		t.Fatal(err)
	}
	if err := a.g.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	for p := range testP {
		if e, err := kv.Get(ctx, LeaseKey("windower", p)); err == nil {
			t.Errorf("partition %d still leased after Leave: %s", p, e.Value())
		}
	}
}

// TestLostAckRenewalKeepsTheLease: after a renewal whose ack was lost, the
// member renews on from the key's revision, keeping its epoch, instead of
// counting the lease as lost and waiting a TTL for it to expire.
func TestLostAckRenewalKeepsTheLease(t *testing.T) {
	b := newBed(t)
	a := b.join("a")
	testenv.CheckFor(t, wait, 20*time.Millisecond, func() error { return settled(a) })
	epoch := a.g.Owned()[3]
	ctx := context.Background()
	kv, err := b.js.KeyValue(ctx, b.bucket)
	if err != nil {
		t.Fatal(err)
	}
	key := LeaseKey("windower", 3)
	var injected uint64
	testenv.CheckFor(t, wait, 10*time.Millisecond, func() error {
		var err error
		injected, err = b.renewBehind(kv, key)
		return err // a renewal of the member may come in between
	})
	testenv.CheckFor(t, wait, 10*time.Millisecond, func() error {
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, w := range b.writes {
			if w.key == key && w.seq > injected && w.holder == "a" {
				return nil
			}
		}
		return fmt.Errorf("no write of %s by the member since revision %d", key, injected)
	})
	if got := a.g.Owned()[3]; got != epoch {
		t.Errorf("partition 3: epoch %d after the lost ack, want %d kept", got, epoch)
	}
	if ended := b.checkHistory(injected); len(ended) != 0 {
		t.Errorf("holdings ended by %v after the lost ack, want none", ended)
	}
}

// renewBehind writes key again as its holder renews it (holder, epoch,
// the TTL, expecting its revision), behind the holder's back: a renewal whose
// ack was lost. It returns the new revision.
func (b *bed) renewBehind(kv jetstream.KeyValue, key string) (uint64, error) {
	ctx := context.Background()
	e, err := kv.Get(ctx, key)
	if err != nil {
		return 0, err
	}
	var v leaseValue
	if err := json.Unmarshal(e.Value(), &v); err != nil {
		return 0, err
	}
	if v.Epoch == 0 {
		v.Epoch = e.Revision() // the acquiring write: renewals name its revision
	}
	ack, err := b.js.PublishMsg(ctx, &nats.Msg{Subject: subject(b.bucket, key), Data: mustJSON(v)},
		jetstream.WithMsgTTL(ttlOf(testTTL)), jetstream.WithExpectLastSequencePerSubject(e.Revision()))
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}
