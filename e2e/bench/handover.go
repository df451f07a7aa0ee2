package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/receiptflow/receiptflow/pkg/lease"
	"github.com/receiptflow/receiptflow/pkg/ledger"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// HandoverRecords caps the records of a hand-over run (issue 27: the row
// is measured at 200k records).
const HandoverRecords = 200_000

// HandoverTTL is the --lease-ttl of the hand-over runs' windowers.
const HandoverTTL = 2 * time.Second

// handoverSpec makes an E2E run a hand-over run: its two windowers form a
// group (no indices, --lease-ttl ttl), and once ingest has published at
// records, windower-0 gets sig and is not restarted.
type handoverSpec struct {
	sig syscall.Signal
	ttl time.Duration
	at  int
}

// handoverResult is what one hand-over run measured, each time from the
// signal.
type handoverResult struct {
	Signal  string
	TTL     time.Duration
	Records int
	EPS     float64
	// Moved are the partitions windower-0 held when it got the signal.
	Moved []int
	// Released: the last of its leases ended in the bucket (released
	// after draining on SIGTERM, expired on SIGKILL).
	Released time.Duration
	// Taken: the survivor held the last of them.
	Taken time.Duration
	// Resumed: the survivor had made its first Redis step on every one
	// (the partition's fence reached the epoch of its lease).
	Resumed time.Duration
	// NoOwner is the longest a moved partition had no lease in the
	// bucket (its lease ended → the survivor's took it).
	NoOwner time.Duration
}

// leaseEvent is one change of a partition's lease the bench saw.
type leaseEvent struct {
	at     time.Time
	p      int
	holder string // "" : the lease ended (released, or expired)
	epoch  uint64
}

// handoverWatch follows a run's windower leases and, after the signal,
// the fence of each moved partition in Redis.
type handoverWatch struct {
	spec   handoverSpec
	victim string // windower-0's member id
	moved  []int
	proc   *serviceProc

	mu       sync.Mutex
	signaled time.Time
	events   []leaseEvent
	resumed  map[int]time.Time // per moved partition: when its fence reached the survivor's epoch
	fenced   chan struct{}     // closed when watchFences returns
}

// settleGroup waits until the windower group has two members holding
// half of the P partitions each, and returns the watch with windower-0's
// member id (found by its HTTP address) and partitions.
func settleGroup(ctx context.Context, js jetstream.JetStream, names wire.Names, P int, dep *deployment, logDir string, spec handoverSpec) (*handoverWatch, error) {
	var victim *serviceProc
	for _, p := range dep.procs {
		if p.name == "windower-0" {
			victim = p
		}
	}
	if victim == nil {
		return nil, fmt.Errorf("bench: hand-over: no windower-0 process")
	}
	deadline := time.Now().Add(60 * time.Second)
	last := ""
	for {
		addr := httpAddr(logDir + "/windower-0.log")
		v, err := lease.Read(ctx, js, names.LeaseBucket())
		if err != nil {
			return nil, err
		}
		var ws []lease.Member
		for _, m := range v.Members {
			if m.Kind == "windower" {
				ws = append(ws, m)
			}
		}
		if len(ws) == 2 && addr != "" {
			a, b := v.Of("windower", ws[0].ID), v.Of("windower", ws[1].ID)
			if len(a) == P/2 && len(b) == P/2 {
				i := slices.IndexFunc(ws, func(m lease.Member) bool { return m.Info == addr })
				if i < 0 {
					return nil, fmt.Errorf("bench: hand-over: no member says it is at %s (windower-0)", addr)
				}
				return &handoverWatch{spec: spec, victim: ws[i].ID, moved: v.Of("windower", ws[i].ID), proc: victim,
					resumed: map[int]time.Time{}, fenced: make(chan struct{})}, nil
			}
			last = fmt.Sprintf("shares %v and %v", a, b)
		} else {
			last = fmt.Sprintf("%d windower members", len(ws))
		}
		if err := dep.failed(); err != nil {
			return nil, err
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w: hand-over: the windower group did not settle within 60s (%s)", errTimeout, last)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// follow records every change of a windower lease until ctx ends.
func (h *handoverWatch) follow(ctx context.Context, kv jetstream.KeyValue, P int) error {
	w, err := kv.Watch(ctx, "windower.lease.*", jetstream.UpdatesOnly())
	if err != nil {
		return err
	}
	keys := map[string]int{}
	for p := range P {
		keys[lease.LeaseKey("windower", p)] = p
	}
	go func() {
		defer w.Stop()
		for e := range w.Updates() {
			if e == nil {
				continue
			}
			now := time.Now()
			p, ok := keys[e.Key()]
			if !ok {
				continue
			}
			ev := leaseEvent{at: now, p: p}
			if l, ok := lease.LeaseOf(e); ok {
				ev.holder, ev.epoch = l.Holder, l.Epoch
			}
			h.mu.Lock()
			h.events = append(h.events, ev)
			h.mu.Unlock()
		}
	}()
	return nil
}

// watchFences polls, from the signal on, the fence of every moved
// partition (field "fence" of its checkpoint hash, pkg/ledger) until each
// has reached the epoch of the survivor's lease, or ctx ends.
func (h *handoverWatch) watchFences(ctx context.Context, rdb *redis.Client, keys ledger.Keys) {
	defer close(h.fenced)
	for ctx.Err() == nil {
		h.mu.Lock()
		want := map[int]uint64{}
		for _, ev := range h.events {
			if ev.holder != "" && ev.holder != h.victim && !ev.at.Before(h.signaled) && want[ev.p] == 0 {
				want[ev.p] = ev.epoch
			}
		}
		left := 0
		for _, p := range h.moved {
			if _, ok := h.resumed[p]; !ok {
				left++
			}
		}
		h.mu.Unlock()
		if left == 0 {
			return
		}
		for p, epoch := range want {
			h.mu.Lock()
			_, done := h.resumed[p]
			h.mu.Unlock()
			if done {
				continue
			}
			f, err := rdb.HGet(ctx, keys.Checkpoint(p), "fence").Uint64()
			if err == nil && f >= epoch {
				h.mu.Lock()
				h.resumed[p] = time.Now()
				h.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// fire sends the signal to windower-0; the run no longer counts its exit
// as a failure.
func (h *handoverWatch) fire() error {
	h.proc.expectExit.Store(true)
	h.mu.Lock()
	h.signaled = time.Now()
	h.mu.Unlock()
	return h.proc.cmd.Process.Signal(h.spec.sig)
}

// result works out the hand-over from what was recorded, once every
// moved partition's fence has been seen (at most 10s more).
func (h *handoverWatch) result() (*handoverResult, error) {
	select {
	case <-h.fenced:
	case <-time.After(10 * time.Second):
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	t0 := h.signaled
	if t0.IsZero() {
		return nil, fmt.Errorf("bench: hand-over: the signal was never sent")
	}
	r := &handoverResult{Signal: signalName(h.spec.sig), TTL: h.spec.ttl, Moved: h.moved}
	for _, p := range h.moved {
		var ended, taken time.Time
		for _, ev := range h.events {
			if ev.p != p || ev.at.Before(t0) {
				continue
			}
			if ev.holder == "" && ended.IsZero() && taken.IsZero() {
				ended = ev.at
			}
			if ev.holder != "" && ev.holder != h.victim && taken.IsZero() {
				taken = ev.at
			}
		}
		if taken.IsZero() {
			return nil, fmt.Errorf("bench: hand-over: partition %d was never taken over after %s", p, signalName(h.spec.sig))
		}
		if ended.IsZero() {
			ended = taken
		}
		resumed, ok := h.resumed[p]
		if !ok {
			return nil, fmt.Errorf("bench: hand-over: the survivor never made a Redis step on partition %d", p)
		}
		r.Released = max(r.Released, ended.Sub(t0))
		r.Taken = max(r.Taken, taken.Sub(t0))
		r.Resumed = max(r.Resumed, resumed.Sub(t0))
		r.NoOwner = max(r.NoOwner, taken.Sub(ended))
	}
	return r, nil
}

// signalName is SIGTERM or SIGKILL (the signals a hand-over run sends).
func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGKILL:
		return "SIGKILL"
	}
	return s.String()
}
