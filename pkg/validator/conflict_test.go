package validator

// Conflicts across partitions (SPEC section 2, docs/bad-input.md row 8):
// between copies of one event_id with different content, the copy with the
// lowest RAW sequence is the event and the others are
// conflicting_duplicate, whatever order the validator instances see them
// in, and for as long as the claims are kept, not only inside JetStream's
// duplicate window.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/ledger"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/window"
)

const conflictParts = 4

// conflictEnv is a real nats-server and a Redis (miniredis or a real
// redis-server), with the topology of conflictParts partitions, on which
// validator instances are started as they are deployed (Service.Run).
type conflictEnv struct {
	t     *testing.T
	ctx   context.Context
	js    jetstream.JetStream
	rdb   *redis.Client
	names stream.Names
	v     *contract.Validator
}

// conflictBackends runs f on miniredis and on a real redis-server.
func conflictBackends(t *testing.T, dupWindow time.Duration, f func(t *testing.T, e *conflictEnv)) {
	for _, backend := range []string{"miniredis", "redis-server"} {
		t.Run(backend, func(t *testing.T) {
			var addr string
			if backend == "miniredis" {
				addr = testenv.Miniredis(t).Addr()
			} else {
				addr = testenv.RedisServer(t).Addr()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			t.Cleanup(cancel)
			_, url := testenv.NATS(t)
			js := testenv.JetStream(t, url)
			names := stream.For("")
			if err := stream.Ensure(ctx, js, names, stream.Config{Partitions: conflictParts, DupWindow: dupWindow}); err != nil {
				t.Fatal(err)
			}
			rdb := redis.NewClient(&redis.Options{Addr: addr})
			t.Cleanup(func() { rdb.Close() })
			v, err := contract.NewValidator(contract.Options{})
			if err != nil {
				t.Fatal(err)
			}
			f(t, &conflictEnv{t: t, ctx: ctx, js: js, rdb: rdb, names: names, v: v})
		})
	}
}

// start runs a validator instance owning the partitions owned until the
// test ends; a failure of Run fails the test.
func (e *conflictEnv) start(owned ...int) {
	e.t.Helper()
	store := ledger.NewStore(e.rdb, ledger.Keys{Prefix: e.names.RedisPrefix()}, 5*time.Minute, time.Hour, ledger.WithHorizon(24*time.Hour))
	s := New(e.js, store, Config{Names: e.names, Partitions: conflictParts, Owned: owned, Validator: e.v})
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
	ack, err := e.js.PublishMsg(e.ctx, stream.NewMsg(e.names.Subject(stream.Raw, p), msgID, rec))
	if err != nil {
		e.t.Fatal(err)
	}
	return ack.Sequence, ack.Duplicate
}

// outcome is where one RAW record ended: "valid" or the rejection reason.
type outcome map[uint64]string

// outcomes waits until n RAW records have an outcome in VALID or REJECTED
// and returns them by RAW sequence.
func (e *conflictEnv) outcomes(n int) outcome {
	e.t.Helper()
	var got outcome
	testenv.CheckFor(e.t, 30*time.Second, 20*time.Millisecond, func() error {
		got = outcome{}
		for _, base := range []string{stream.Valid, stream.Rejected} {
			if err := stream.ReadAll(e.ctx, e.js, e.names.Stream(base), func(m jetstream.Msg) error {
				seq, _ := strconv.ParseUint(m.Headers().Get(stream.HdrRawSeq), 10, 64)
				if base == stream.Valid {
					got[seq] = "valid"
				} else {
					got[seq] = m.Headers().Get(stream.HdrReason)
				}
				return nil
			}); err != nil {
				return err
			}
		}
		if len(got) < n {
			return fmt.Errorf("%d of %d records have an outcome", len(got), n)
		}
		return nil
	})
	return got
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
// not a conflict (it goes to VALID, where the windower's ledger drops it);
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
		got := e.outcomes(3)
		wantOutcome(t, got, first, "valid")
		wantOutcome(t, got, retry, "valid")
		wantOutcome(t, got, other, string(contract.ReasonConflictingDuplicate))
	})
}
