package daemon

import (
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/stream"
)

// health is what /readyz (probe.Port) says of the service: ready while it
// runs, NATS is connected and Redis answered recently (notReady).
type health struct {
	ready   atomic.Bool
	waiting atomic.Pointer[string] // what the service waits for, if anything
	nc      atomic.Pointer[nats.Conn]
	redisOK atomic.Int64           // unix nanos of the last successful Redis ping
	maxAge  atomic.Int64           // how old that ping may be, nanos
	stalled atomic.Pointer[string] // why the service makes no progress ("" or nil: it does)
	// full learns from the consume loops while the broker's store is
	// full; restartFull is set while the service waits to start again
	// after a refusal outside them, counted in fullRestarts.
	full         stream.StoreWatch
	restartFull  atomic.Bool
	fullRestarts atomic.Int64
	// redisRefused is why Redis is refused (its eviction policy), "" when
	// it is not; redisFull follows its OOM refusals.
	redisRefused atomic.Pointer[string]
	redisFull    atomic.Pointer[connect.FullWatch]
	// owned is the partitions the service runs now (/readyz, the
	// owned_partitions gauge).
	owned atomic.Pointer[[]int]
}

// setOwned records the partitions the service runs now.
func (h *health) setOwned(owned []int) { h.owned.Store(&owned) }

// ownedNow returns the partitions the service runs now.
func (h *health) ownedNow() []int {
	if o := h.owned.Load(); o != nil {
		return *o
	}
	return nil
}

// detail is what /readyz adds to its answer: the partitions owned.
func (h *health) detail() string { return ownedText(h.ownedNow()) }

// storeFull reports whether the service waits for room in the broker's
// store.
func (h *health) storeFull() bool {
	full, _, _ := h.full.Full()
	return full || h.restartFull.Load()
}

// wait records what the service waits for ("" when nothing); /readyz
// names it. Safe on a nil h.
func (h *health) wait(what string) {
	if h != nil {
		h.waiting.Store(&what)
	}
}

// notReady returns why the service is not ready, "" when it is.
func (h *health) notReady() string {
	if w := h.waiting.Load(); w != nil && *w != "" {
		return "waiting for " + *w
	}
	if r := h.redisRefused.Load(); r != nil && *r != "" {
		return "redis refused: " + *r
	}
	if !h.ready.Load() {
		return "service not running"
	}
	if nc := h.nc.Load(); nc == nil || !nc.IsConnected() {
		return "nats not connected"
	}
	if full, since, last := h.full.Full(); full {
		return "the broker's store is full since " + since.UTC().Format(time.RFC3339) + ": waiting for room, nothing acknowledged (" + last + ")"
	}
	if age := time.Duration(time.Now().UnixNano() - h.redisOK.Load()); h.maxAge.Load() > 0 && age > time.Duration(h.maxAge.Load()) {
		return "redis not answering for " + age.Round(time.Second).String()
	}
	if w := h.redisFull.Load(); w != nil {
		if err := w.Full(); err != nil {
			return "redis is full, writes wait until memory is freed: " + err.Error()
		}
	}
	if s := h.stalled.Load(); s != nil && *s != "" {
		return *s
	}
	return ""
}
