package windower

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/receiptflow/receiptflow/pkg/failpoint"
	"github.com/receiptflow/receiptflow/pkg/ledger"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// fixture is one partition's VALID stream on an in-process nats-server and
// a ledger in miniredis, for driving windower instances by hand.
type fixture struct {
	t     *testing.T
	ctx   context.Context
	js    jetstream.JetStream
	store *ledger.Store
	rdb   *redis.Client
	names wire.Names
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	_, url := testenv.NATS(t)
	js := testenv.JetStream(t, url)
	names := wire.For("")
	if err := stream.Ensure(ctx, js, names, stream.Config{}); err != nil {
		t.Fatal(err)
	}
	mr := testenv.Miniredis(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	store := ledger.NewStore(rdb, ledger.Config{Keys: ledger.Keys{Prefix: names.RedisPrefix()}, Grace: time.Minute})
	return &fixture{t: t, ctx: ctx, js: js, store: store, rdb: rdb, names: names}
}

// submit publishes a validator-shaped submission to partition 0 of VALID.
func (f *fixture) submit(id string, at time.Time, rawSeq int) {
	f.t.Helper()
	m := stream.NewMsg(f.names.Subject(wire.Valid, 0), id, []byte(`{}`))
	m.Header.Set(wire.HdrKind, "s")
	m.Header.Set(wire.HdrTime, strconv.FormatInt(at.UnixMilli(), 10))
	m.Header.Set(wire.HdrEventID, id)
	m.Header.Set(wire.HdrRawSeq, strconv.Itoa(rawSeq))
	if _, err := f.js.PublishMsg(f.ctx, m); err != nil {
		f.t.Fatal(err)
	}
}

// run runs one windower instance over partition 0 until it crashes at a
// failpoint (returns the error) or, without failpoints, for d.
func (f *fixture) run(batch int, fps string, d time.Duration) error {
	f.t.Helper()
	set, err := failpoint.Parse(fps, failpoint.InProcess)
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	stop := time.AfterFunc(d, cancel)
	defer stop.Stop()
	// A long linger makes every batch as large as Batch allows (all records
	// are in the stream before the instance starts), so the test knows
	// where each one ends.
	w := New(f.js, f.store, Config{Names: f.names, Partitions: 1, Batch: batch, Linger: 200 * time.Millisecond, Failpoints: set})
	return w.Run(ctx)
}

// lateIDs reads the event ids of every LATE message of partition 0.
func (f *fixture) lateIDs() map[string]bool {
	f.t.Helper()
	st, err := f.js.Stream(f.ctx, f.names.Stream(wire.Late))
	if err != nil {
		f.t.Fatal(err)
	}
	info, err := st.Info(f.ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	ids := map[string]bool{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(f.ctx, seq)
		if err != nil {
			f.t.Fatal(err)
		}
		ids[m.Header.Get(jetstream.MsgIDHeader)] = true
	}
	return ids
}

// TestRedrivenShortBatchKeepsLateOutputs: a batch is applied and the
// instance dies before publishing its LATE messages; the next instance is
// redelivered the records in a shorter batch (a smaller fetch) and dies
// before its second batch. The published mark must cover only what was
// actually re-published, so a third instance publishes the rest: every late
// event ends up in LATE exactly once.
func TestRedrivenShortBatchKeepsLateOutputs(t *testing.T) {
	f := newFixture(t)
	base := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	// Ten events two hours ahead move the watermark; the ninety after them
	// belong to a window long past its grace: all late.
	for i := 1; i <= 10; i++ {
		f.submit("ahead-"+strconv.Itoa(i), base.Add(2*time.Hour+time.Duration(i)*time.Second), i)
	}
	want := map[string]bool{}
	for i := 11; i <= 100; i++ {
		id := "behind-" + strconv.Itoa(i)
		f.submit(id, base.Add(time.Duration(i)*time.Second), i)
		want["late-"+id] = true
	}

	// 1: applies records 1..100 in one batch, dies before publishing.
	if err := f.run(100, failpoint.WindowerAfterWrite+"=crash@every:1", time.Minute); !errors.Is(err, failpoint.ErrCrash) {
		t.Fatalf("first instance: %v, want a crash after the write", err)
	}
	if got := f.lateIDs(); len(got) != 0 {
		t.Fatalf("LATE holds %d messages before any publish", len(got))
	}
	// 2: redelivered 1..60 (all applied before), publishes their LATE
	// messages, dies before writing 61..100.
	if err := f.run(60, failpoint.WindowerBeforeWrite+"=crash@every:2", time.Minute); !errors.Is(err, failpoint.ErrCrash) {
		t.Fatalf("second instance: %v, want a crash before the second write", err)
	}
	ck, err := f.store.Checkpoint(f.ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The redelivered batch holds at most 60 records (fewer if the
	// consumer had fewer buffered); the mark covers exactly what the second
	// instance re-published, never the records it died before.
	if ck.Seq != 100 || ck.Published == 0 || ck.Published > 60 {
		t.Fatalf("checkpoint after the short redelivery: seq %d published %d, want 100 and 1..60", ck.Seq, ck.Published)
	}
	// 3: no failpoints; must publish the late events of 61..100.
	testenv.CheckFor(t, 30*time.Second, 100*time.Millisecond, func() error {
		if err := f.run(100, "", 2*time.Second); err != nil {
			return err
		}
		got := f.lateIDs()
		for id := range want {
			if !got[id] {
				return errors.New("LATE misses " + id + " (" + strconv.Itoa(len(got)) + " of " + strconv.Itoa(len(want)) + ")")
			}
		}
		if len(got) != len(want) {
			return errors.New("LATE holds " + strconv.Itoa(len(got)) + " messages, want " + strconv.Itoa(len(want)))
		}
		return nil
	})
}
