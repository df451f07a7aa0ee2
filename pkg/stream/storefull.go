package stream

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// JetStream error codes of a write refused for lack of room (nats-server
// jetstream_errors_generated.go).
const (
	// ErrCodeInsufficientResources: the server's max_file_store (or
	// max_memory_store) is used up ("insufficient resources").
	ErrCodeInsufficientResources jetstream.ErrorCode = 10023
	// ErrCodeAccountResourcesExceeded: the account's JetStream storage
	// limit is reached ("resource limits exceeded for account").
	ErrCodeAccountResourcesExceeded jetstream.ErrorCode = 10002
	// ErrCodeStoreFailed: the stream refused to store the message; with
	// DiscardNew at its limits the description is "maximum bytes
	// exceeded", "maximum messages exceeded" or "maximum messages per
	// subject exceeded".
	ErrCodeStoreFailed jetstream.ErrorCode = 10077
)

// StoreFull reports whether err is the broker refusing a write because a
// store is full: the server's or the account's JetStream storage limit is
// reached, or a DiscardNew stream is at its max_bytes, max_msgs or
// max_msgs_per_subject. Nothing of the refused write is stored, and it can
// succeed once space is freed (a limit raised, messages removed). Every
// output of the services is idempotent (a Nats-Msg-Id, or a KV revision
// compare-and-set), so waiting and writing again is safe.
func StoreFull(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case ErrCodeInsufficientResources, ErrCodeAccountResourcesExceeded:
		return true
	case ErrCodeStoreFailed:
		d := apiErr.Description
		return strings.HasPrefix(d, "maximum bytes exceeded") || strings.HasPrefix(d, "maximum messages exceeded") ||
			strings.HasPrefix(d, "maximum messages per subject exceeded")
	}
	return false
}

// StoreWatch records whether some consume loop of a process waits because
// the broker's store is full (StoreFull): Consume reports to the watch of
// its context (WithStoreWatch), and the service process shows it on
// /readyz and in a metric. Safe for concurrent use; the zero value is
// ready to use.
type StoreWatch struct {
	mu       sync.Mutex
	blocked  int // loops waiting now
	since    time.Time
	last     string
	refusals int64
}

// Full reports whether a loop waits for room, since when, and the last
// refusal.
func (w *StoreWatch) Full() (full bool, since time.Time, last string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.blocked > 0, w.since, w.last
}

// Refusals is how many batches the broker refused for a full store.
func (w *StoreWatch) Refusals() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.refusals
}

// refused records a refusal; first tells that the loop was not waiting
// before.
func (w *StoreWatch) refused(err error, first bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.refusals++
	w.last = err.Error()
	if first {
		if w.blocked == 0 {
			w.since = time.Now()
		}
		w.blocked++
	}
}

// resumed records that a waiting loop wrote again, or stopped.
func (w *StoreWatch) resumed() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.blocked = max(w.blocked-1, 0)
}

type storeWatchKey struct{}

// WithStoreWatch returns a copy of ctx that carries w: every Consume
// under it reports to w while the broker's store is full.
func WithStoreWatch(ctx context.Context, w *StoreWatch) context.Context {
	return context.WithValue(ctx, storeWatchKey{}, w)
}

// storeWatchOf returns the watch ctx carries, or nil.
func storeWatchOf(ctx context.Context) *StoreWatch {
	w, _ := ctx.Value(storeWatchKey{}).(*StoreWatch)
	return w
}
