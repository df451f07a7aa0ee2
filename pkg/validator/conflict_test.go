package validator

// Conflicts across partitions (docs/spec.md §2, docs/bad-input.md row 8):
// between copies of one event_id with different content, the copy with the
// lowest RAW sequence is the event and the others are
// conflicting_duplicate, whatever order the validator instances see them
// in, and for as long as the claims are kept, not only inside JetStream's
// duplicate window.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/ledger"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

const conflictParts = 4

// conflictEnv is a real nats-server and a Redis (miniredis or a real
// redis-server), with the topology of conflictParts partitions, on which
// validator instances are started as they are deployed (Service.Run).
type conflictEnv struct {
	t   *testing.T
	ctx context.Context
	js  jetstream.JetStream
	rdb redis.UniversalClient
	// cluster is the Redis Cluster rdb talks to, if any.
	cluster *testenv.RedisCluster
	names   wire.Names
	v       *contract.Validator
	// idleEvery, if set, is the instances' Config.IdleEvery.
	idleEvery time.Duration
	// wrap, if set, wraps the JetStream the instances are given.
	wrap func(jetstream.JetStream) jetstream.JetStream
}

// conflictBackends runs f on miniredis and on a real redis-server.
func conflictBackends(t *testing.T, dupWindow time.Duration, f func(t *testing.T, e *conflictEnv)) {
	conflictBackendsOn(t, []string{"miniredis", "redis-server"}, dupWindow, f)
}

// conflictBackendsOn runs f on each backend: miniredis, redis-server or
// redis-cluster (three masters).
func conflictBackendsOn(t *testing.T, backends []string, dupWindow time.Duration, f func(t *testing.T, e *conflictEnv)) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			var (
				rdb     redis.UniversalClient
				cluster *testenv.RedisCluster
			)
			switch backend {
			case "miniredis":
				rdb = redis.NewClient(&redis.Options{Addr: testenv.Miniredis(t).Addr()})
			case "redis-server":
				rdb = redis.NewClient(&redis.Options{Addr: testenv.RedisServer(t).Addr()})
			case "redis-cluster":
				cluster = testenv.NewRedisCluster(t, 3)
				rdb = cluster.Client(t)
			default:
				t.Fatalf("unknown backend %q", backend)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			t.Cleanup(cancel)
			_, url := testenv.NATS(t)
			js := testenv.JetStream(t, url)
			names := wire.For("")
			if err := stream.Ensure(ctx, js, names, stream.Config{Partitions: conflictParts, DupWindow: dupWindow}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { rdb.Close() })
			v, err := contract.NewValidator(contract.Config{})
			if err != nil {
				t.Fatal(err)
			}
			f(t, &conflictEnv{t: t, ctx: ctx, js: js, rdb: rdb, cluster: cluster, names: names, v: v})
		})
	}
}

// start runs a validator instance owning the partitions owned until the
// test ends; a failure of Run fails the test.
func (e *conflictEnv) start(owned ...int) {
	e.t.Helper()
	e.startWith(nil, owned...)
}

// startWith is start with the instance's metrics on reg.
func (e *conflictEnv) startWith(reg prometheus.Registerer, owned ...int) {
	e.t.Helper()
	store := ledger.NewStore(e.rdb, ledger.Config{Keys: ledger.Keys{Prefix: e.names.RedisPrefix()}, Lateness: 5 * time.Minute, Grace: time.Hour, Horizon: 24 * time.Hour})
	js := e.js
	if e.wrap != nil {
		js = e.wrap(js)
	}
	s := New(js, store, Config{Names: e.names, Partitions: conflictParts, Owned: owned, Validator: e.v, Registerer: reg, IdleEvery: e.idleEvery,
		Logger: slog.New(slog.NewTextHandler(testLog{e.t}, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	ctx, cancel := context.WithCancel(e.ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := s.Run(ctx); err != nil && ctx.Err() == nil {
			e.t.Errorf("validator %v: %v", owned, err)
		}
	}()
	e.t.Cleanup(func() { cancel(); wg.Wait() })
}

// keyFor is a partition key that routes to partition p.
func keyFor(t *testing.T, p int) string {
	for i := 0; i < 1000; i++ {
		k := "store-" + strconv.Itoa(i)
		if window.Route(k, "", conflictParts, nil) == p {
			return k
		}
	}
	t.Fatalf("no key routes to partition %d", p)
	return ""
}

// event is a valid submission of id in partition p with payload value v.
func event(t *testing.T, id string, p, v int) []byte {
	return []byte(`{"schema_version":2,"event_id":"` + id + `","receipt_id":"r1","type":"submitted",` +
		`"occurred_at":"2026-12-02T10:15:00Z","ingested_at":"2026-12-02T10:16:00Z","partition_key":"` + keyFor(t, p) +
		`","producer_version":"p","payload":{"v":` + strconv.Itoa(v) + `}}`)
}

// publish stores rec on RAW partition p under msgID and returns its RAW
// sequence and whether JetStream dropped it as a duplicate.
func (e *conflictEnv) publish(p int, msgID string, rec []byte) (uint64, bool) {
	e.t.Helper()
	ack, err := e.js.PublishMsg(e.ctx, stream.NewMsg(e.names.Subject(wire.Raw, p), msgID, rec))
	if err != nil {
		e.t.Fatal(err)
	}
	return ack.Sequence, ack.Duplicate
}

// outcome is where one RAW record ended: "valid" or the rejection reason.
type outcome map[uint64]string

// outcomes waits until VALID and REJECTED hold n messages together (read
// from stream info, cheaply) and returns where each RAW record ended, by
// RAW sequence.
func (e *conflictEnv) outcomes(n int) outcome {
	e.t.Helper()
	testenv.CheckFor(e.t, 30*time.Second, 20*time.Millisecond, func() error {
		if got := e.count(wire.Valid) + e.count(wire.Rejected); got < uint64(n) {
			return fmt.Errorf("%d of %d records have an outcome", got, n)
		}
		return nil
	})
	got := outcome{}
	if err := stream.ReadValid(e.ctx, e.js, e.names.Stream(wire.Valid), func(v stream.ValidRecord) error {
		got[v.RawSeq] = "valid"
		return nil
	}); err != nil {
		e.t.Fatal(err)
	}
	if err := stream.ReadAll(e.ctx, e.js, e.names.Stream(wire.Rejected), func(m jetstream.Msg) error {
		seq, _ := strconv.ParseUint(m.Headers().Get(wire.HdrRawSeq), 10, 64)
		got[seq] = m.Headers().Get(wire.HdrReason)
		return nil
	}); err != nil {
		e.t.Fatal(err)
	}
	return got
}

// acked waits until the validator of partition p has acknowledged RAW
// through seq.
func (e *conflictEnv) acked(p int, seq uint64) {
	e.t.Helper()
	testenv.CheckFor(e.t, 30*time.Second, 20*time.Millisecond, func() error {
		c, err := e.js.Consumer(e.ctx, e.names.Stream(wire.Raw), wire.Durable("validator", p))
		if err != nil {
			return err
		}
		if f := c.CachedInfo().AckFloor.Stream; f < seq {
			return fmt.Errorf("partition %d acknowledged through %d, want %d", p, f, seq)
		}
		return nil
	})
}

// claimed waits until some claim is written in Redis.
func (e *conflictEnv) claimed() {
	e.t.Helper()
	testenv.CheckFor(e.t, 30*time.Second, 10*time.Millisecond, func() error {
		keys, err := e.rdb.Keys(e.ctx, e.names.RedisPrefix()+"{c*}:claims:*").Result()
		if err != nil {
			return err
		}
		if len(keys) == 0 {
			return errors.New("no claim yet")
		}
		return nil
	})
}

func wantOutcome(t *testing.T, got outcome, seq uint64, want string) {
	t.Helper()
	if got[seq] != want {
		t.Errorf("RAW %d is %q, want %q", seq, got[seq], want)
	}
}

// TestConflictLowestSequenceWinsAcrossInstances: two validator instances
// split the partitions. The copy at the higher RAW sequence is in the
// partition of the instance that starts first and claims first; the copy at
// the lower sequence is claimed later by the other instance. The lower one
// is the event, the higher one is conflicting_duplicate.
func TestConflictLowestSequenceWinsAcrossInstances(t *testing.T) {
	conflictBackends(t, 0, func(t *testing.T, e *conflictEnv) {
		low, _ := e.publish(0, "dup-1:a", event(t, "dup-1", 0, 1))
		high, _ := e.publish(1, "dup-1:b", event(t, "dup-1", 1, 2))
		e.start(1, 3)
		e.claimed() // the higher copy's instance claimed the id first
		e.start(0, 2)
		got := e.outcomes(2)
		wantOutcome(t, got, low, "valid")
		wantOutcome(t, got, high, string(contract.ReasonConflictingDuplicate))
	})
}

// TestConflictLowestSequenceWinsOneInstance: one instance owns every
// partition; the partition of the lower copy has a backlog in front of it,
// so the partition of the higher copy reaches its copy first.
func TestConflictLowestSequenceWinsOneInstance(t *testing.T) {
	conflictBackends(t, 0, func(t *testing.T, e *conflictEnv) {
		for i := 0; i < 1200; i++ {
			id := "fill-" + strconv.Itoa(i)
			e.publish(0, id, event(t, id, 0, i))
		}
		low, _ := e.publish(0, "dup-2:a", event(t, "dup-2", 0, 1))
		high, _ := e.publish(2, "dup-2:b", event(t, "dup-2", 2, 2))
		e.start()
		got := e.outcomes(1202)
		wantOutcome(t, got, low, "valid")
		wantOutcome(t, got, high, string(contract.ReasonConflictingDuplicate))
	})
}

// TestConflictPastDuplicateWindow: JetStream's duplicate window (here
// 100 ms) has passed between the copies, so every copy reaches the
// validator. A retry of the event with the same content past the window is
// not a conflict (it goes to VALID, where the windower's ledger drops it,
// if VALID's duplicate window does not drop it first);
// a copy with other content in another partition is conflicting.
func TestConflictPastDuplicateWindow(t *testing.T) {
	conflictBackends(t, 100*time.Millisecond, func(t *testing.T, e *conflictEnv) {
		e.start()
		first, _ := e.publish(1, "dup-3:a", event(t, "dup-3", 1, 1))
		e.outcomes(1)
		var retry uint64
		testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
			seq, dup := e.publish(1, "dup-3:a", event(t, "dup-3", 1, 1))
			if dup {
				return errors.New("still inside the duplicate window")
			}
			retry = seq
			return nil
		})
		other, _ := e.publish(3, "dup-3:b", event(t, "dup-3", 3, 2))
		e.acked(1, retry)
		e.acked(3, other)
		got := e.outcomes(2)
		wantOutcome(t, got, first, "valid")
		wantOutcome(t, got, other, string(contract.ReasonConflictingDuplicate))
		// The retry reached VALID, or VALID's own duplicate window (whose
		// start is a moment later than RAW's) dropped it: either way it is
		// not a conflict.
		if r, ok := got[retry]; ok && r != "valid" {
			t.Errorf("the retry at RAW %d is %q, want valid (or dropped as a duplicate)", retry, r)
		}
	})
}

// TestConflictBarrierStallsWithoutOtherPartition: a partition that no
// validator runs holds every other partition's valid events back (the
// price of the rule), and the waiting partition says which one it waits
// for; once that partition runs, both drain.
func TestConflictBarrierStallsWithoutOtherPartition(t *testing.T) {
	conflictBackends(t, 0, func(t *testing.T, e *conflictEnv) {
		reg := prometheus.NewRegistry()
		// Partition 0 holds RAW 1, so partition 2's RAW 2 waits for it.
		e.publish(0, "first-1", event(t, "first-1", 0, 1))
		e.publish(2, "only-1", event(t, "only-1", 2, 1))
		e.startWith(reg, 1, 2, 3)
		testenv.CheckFor(t, 30*time.Second, 10*time.Millisecond, func() error {
			if v := gaugeLabelled(t, reg, "receiptflow_validator_barrier_waiting", "partition", "2", "waiting_for", "0"); v != 1 {
				return fmt.Errorf("barrier_waiting{partition=2,waiting_for=0} is %v, want 1", v)
			}
			return nil
		})
		// The deprecated gauge, exported for one release, says the same.
		if v := gaugeValue(t, reg, "receiptflow_validator_barrier_waiting_for", "2"); v != 0 {
			t.Errorf("partition 2 waits for %v, want 0", v)
		}
		// It waits after its claims, before publishing: nothing is in VALID.
		if n := e.count(wire.Valid); n != 0 {
			t.Fatalf("VALID holds %d messages while partition 0 has not claimed", n)
		}
		e.start(0)
		got := e.outcomes(2)
		wantOutcome(t, got, 1, "valid")
		wantOutcome(t, got, 2, "valid")
		testenv.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
			if v := gaugeLabelled(t, reg, "receiptflow_validator_barrier_waiting", "partition", "2", "waiting_for", "0"); v != 0 {
				return fmt.Errorf("partition 2 still waits for partition 0: %v", v)
			}
			if v := gaugeValue(t, reg, "receiptflow_validator_barrier_waiting_for", "2"); v != -1 {
				return fmt.Errorf("partition 2 still waits for %v", v)
			}
			return nil
		})
	})
}

// TestConflictManyCopiesAnyOrder: many ids with copies in several
// partitions, some with the same content as another copy, consumed by two
// instances started in turn, or by one: every id has one VALID event with
// the content of its lowest copy (a later copy with that content is a
// retry: VALID's duplicate window or the windower's ledger drops it), and
// every copy with other content is conflicting_duplicate.
func TestConflictManyCopiesAnyOrder(t *testing.T) {
	for _, split := range []bool{true, false} {
		t.Run(fmt.Sprintf("split=%v", split), func(t *testing.T) {
			conflictBackends(t, 0, func(t *testing.T, e *conflictEnv) {
				rng := rand.New(rand.NewPCG(7, 11))
				// The partition key is content too: a copy is (payload, partition).
				lowest := map[string][2]int{} // event id -> content of its lowest copy
				conflicting := map[uint64]bool{}
				for i := 0; i < 600; i++ {
					id, content, p := "many-"+strconv.Itoa(rng.IntN(120)), rng.IntN(3), rng.IntN(conflictParts)
					seq, dup := e.publish(p, fmt.Sprintf("%s:%d:%d", id, content, i), event(t, id, p, content))
					if dup {
						t.Fatalf("record %d dropped as a duplicate", i)
					}
					if c, ok := lowest[id]; !ok {
						lowest[id] = [2]int{content, p}
					} else if c != [2]int{content, p} {
						conflicting[seq] = true
					}
				}
				e.startSplit(split)
				e.checkLowestWins(lowest, conflicting)
			})
		})
	}
}

// startSplit starts two validator instances in turn, the second once the
// first has claimed, splitting the partitions between them (split), or one
// instance for all of them.
func (e *conflictEnv) startSplit(split bool) {
	e.t.Helper()
	if split {
		e.start(1, 3)
		e.claimed()
		e.start(0, 2)
		return
	}
	e.start()
}

// checkLowestWins waits until every id has its VALID event and every
// conflicting copy its REJECTED row, and checks that each id counts the
// content (and partition) of its lowest copy, lowest, and that exactly
// the copies conflicting are conflicting_duplicate.
func (e *conflictEnv) checkLowestWins(lowest map[string][2]int, conflicting map[uint64]bool) {
	e.t.Helper()
	// Once, shortly before CheckFor gives up, say what is left.
	start, told := time.Now(), false
	testenv.CheckFor(e.t, 30*time.Second, 20*time.Millisecond, func() error {
		v, r := e.count(wire.Valid), e.count(wire.Rejected)
		if v >= uint64(len(lowest)) && r >= uint64(len(conflicting)) {
			return nil
		}
		if !told && time.Since(start) > 29*time.Second {
			told = true
			e.diagnose(conflicting)
		}
		return fmt.Errorf("VALID %d of %d, REJECTED %d of %d", v, len(lowest), r, len(conflicting))
	})
	var valid map[string][2]int
	var rejected map[uint64]string
	testenv.CheckFor(e.t, 10*time.Second, 200*time.Millisecond, func() error {
		valid, rejected = map[string][2]int{}, map[uint64]string{}
		// VALID's frames name each record's RAW sequence; the
		// content is read there.
		raw := map[uint64][]byte{}
		if err := stream.ReadAll(e.ctx, e.js, e.names.Stream(wire.Raw), func(m jetstream.Msg) error {
			meta, err := m.Metadata()
			if err == nil {
				raw[meta.Sequence.Stream] = m.Data()
			}
			return err
		}); err != nil {
			return err
		}
		if err := stream.ReadValid(e.ctx, e.js, e.names.Stream(wire.Valid), func(v stream.ValidRecord) error {
			var ev struct {
				EventID      string `json:"event_id"`
				PartitionKey string `json:"partition_key"`
				Payload      struct {
					V int `json:"v"`
				} `json:"payload"`
			}
			if err := json.Unmarshal(raw[v.RawSeq], &ev); err != nil {
				return err
			}
			if ev.EventID != v.EventID {
				return fmt.Errorf("VALID names %s at RAW sequence %d, which holds %s", v.EventID, v.RawSeq, ev.EventID)
			}
			// Identical copies may each be in VALID (frames carry no
			// per-event message id; the windower's ledger counts
			// the id once): never two contents.
			c := [2]int{ev.Payload.V, window.Route(ev.PartitionKey, "", conflictParts, nil)}
			if prev, ok := valid[ev.EventID]; ok && prev != c {
				return fmt.Errorf("%s twice in VALID with other content: %v and %v", ev.EventID, prev, c)
			}
			valid[ev.EventID] = c
			return nil
		}); err != nil {
			return err
		}
		if err := stream.ReadAll(e.ctx, e.js, e.names.Stream(wire.Rejected), func(m jetstream.Msg) error {
			seq, _ := strconv.ParseUint(m.Headers().Get(wire.HdrRawSeq), 10, 64)
			rejected[seq] = m.Headers().Get(wire.HdrReason)
			return nil
		}); err != nil {
			return err
		}
		if len(valid) < len(lowest) || len(rejected) < len(conflicting) {
			return fmt.Errorf("%d of %d ids valid, %d of %d conflicts rejected", len(valid), len(lowest), len(rejected), len(conflicting))
		}
		return nil
	})
	for id, c := range lowest {
		if valid[id] != c {
			e.t.Errorf("%s counts content and partition %v, want %v (its lowest copy's)", id, valid[id], c)
		}
	}
	for seq, reason := range rejected {
		if !conflicting[seq] || reason != string(contract.ReasonConflictingDuplicate) {
			e.t.Errorf("RAW %d rejected %s; a conflict: %v", seq, reason, conflicting[seq])
		}
	}
	if len(rejected) != len(conflicting) {
		e.t.Errorf("%d rejected, want %d", len(rejected), len(conflicting))
	}
}

// diagnose logs what a stuck or misjudged run left: the conflicting copies
// not in REJECTED, each partition's claim progress and consumer state.
func (e *conflictEnv) diagnose(conflicting map[uint64]bool) {
	got := e.outcomes(0)
	for seq := range conflicting {
		if got[seq] != string(contract.ReasonConflictingDuplicate) {
			m, _ := e.js.Stream(e.ctx, e.names.Stream(wire.Raw))
			raw, _ := m.GetMsg(e.ctx, seq)
			body := ""
			if raw != nil {
				body = string(raw.Data)
			}
			e.t.Logf("RAW %d is %q, want conflicting_duplicate: %s", seq, got[seq], body)
		}
	}
	pr, err := e.rdb.HGetAll(e.ctx, e.names.RedisPrefix()+"claims:progress").Result()
	e.t.Logf("claim progress %v (%v)", pr, err)
	for p := 0; p < conflictParts; p++ {
		c, err := e.js.Consumer(e.ctx, e.names.Stream(wire.Raw), wire.Durable("validator", p))
		if err != nil {
			e.t.Logf("partition %d consumer: %v", p, err)
			continue
		}
		ci := c.CachedInfo()
		e.t.Logf("partition %d: ack floor %d, delivered %d, pending %d, ack pending %d", p, ci.AckFloor.Stream, ci.Delivered.Stream, ci.NumPending, ci.NumAckPending)
	}
}

// count is the number of messages in a stream of the generation.
// count is how many messages stream base holds; for VALID, how many
// records its frames hold.
func (e *conflictEnv) count(base string) uint64 {
	e.t.Helper()
	if base == wire.Valid {
		var n uint64
		if err := stream.ReadValid(e.ctx, e.js, e.names.Stream(base), func(stream.ValidRecord) error { n++; return nil }); err != nil {
			e.t.Fatal(err)
		}
		return n
	}
	st, err := e.js.Stream(e.ctx, e.names.Stream(base))
	if err != nil {
		e.t.Fatal(err)
	}
	return st.CachedInfo().State.Msgs
}

// gaugeValue reads one labelled gauge from reg (NaN when absent).
func gaugeValue(t *testing.T, reg *prometheus.Registry, name, partition string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "partition" && l.GetValue() == partition {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return math.NaN()
}

// gaugeLabelled reads the gauge name of reg whose labels are the given
// name, value pairs (NaN when absent).
func gaugeLabelled(t *testing.T, reg *prometheus.Registry, name string, pairs ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(pairs); i += 2 {
				if labels[pairs[i]] != pairs[i+1] {
					continue series
				}
			}
			return m.GetGauge().GetValue()
		}
	}
	return math.NaN()
}

// testLog writes a validator's warnings to the test log.
type testLog struct{ t *testing.T }

func (w testLog) Write(b []byte) (int, error) {
	w.t.Log(string(b))
	return len(b), nil
}

// TestConflictRejectedNamesTheCountedWindow (docs/explain.md): a
// conflicting copy's REJECTED row names the window of the copy that holds
// the id (its claim's RAW sequence, read back from RAW), not its own; none
// when that copy is of a type that never counts. Explain finds a window's
// conflicts there for as long as the window is kept.
func TestConflictRejectedNamesTheCountedWindow(t *testing.T) {
	conflictBackends(t, 0, func(t *testing.T, e *conflictEnv) {
		rec := func(id, typ, at string, p int) []byte {
			return []byte(`{"schema_version":2,"event_id":"` + id + `","receipt_id":"r1","type":"` + typ + `",` +
				`"occurred_at":"` + at + `","ingested_at":"2026-12-02T12:59:00Z","partition_key":"` + keyFor(t, p) +
				`","producer_version":"p","payload":{}}`)
		}
		e.publish(0, "w-1:a", rec("w-1", "submitted", "2026-12-02T10:15:00Z", 0))
		e.publish(1, "w-2:a", rec("w-2", "viewed", "2026-12-02T10:20:00Z", 1))
		hi1, _ := e.publish(2, "w-1:b", rec("w-1", "submitted", "2026-12-02T12:40:00Z", 2))
		hi2, _ := e.publish(3, "w-2:b", rec("w-2", "submitted", "2026-12-02T12:45:00Z", 3))
		e.start()
		got := e.outcomes(4)
		wantOutcome(t, got, hi1, string(contract.ReasonConflictingDuplicate))
		wantOutcome(t, got, hi2, string(contract.ReasonConflictingDuplicate))
		want := map[uint64]string{hi1: "2026-12-02T10", hi2: wire.WindowNone}
		named := map[uint64]string{}
		if err := stream.ReadAll(e.ctx, e.js, e.names.Stream(wire.Rejected), func(m jetstream.Msg) error {
			seq, _ := strconv.ParseUint(m.Headers().Get(wire.HdrRawSeq), 10, 64)
			named[seq] = m.Headers().Get(wire.HdrWindow)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		for seq, w := range want {
			if named[seq] != w {
				t.Errorf("REJECTED row of RAW %d names window %q, want %q", seq, named[seq], w)
			}
		}
	})
}
