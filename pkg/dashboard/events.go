package dashboard

import (
	"context"
	"encoding/json"
	"sync"
	"time"
)

// Push timing: a change is pushed after at most pushDelay (changes within
// it are coalesced into one push), and the view is pushed every
// pushEvery even without a change, so that staleness judged by the clock
// shows and idle connections stay open.
const (
	pushDelay = 100 * time.Millisecond
	pushEvery = time.Second
)

// hub fans the page's view out to the open event streams.
type hub struct {
	m       *metrics
	mu      sync.Mutex
	clients map[chan []byte]struct{}
	closed  bool
	done    chan struct{}
	kick    chan struct{}
}

func newHub(m *metrics) *hub {
	return &hub{m: m, clients: map[chan []byte]struct{}{}, done: make(chan struct{}), kick: make(chan struct{}, 1)}
}

// notify says the view changed. It never blocks.
func (h *hub) notify() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// subscribe returns a channel receiving each new view (an unsent older
// one is replaced by it); ok is false once the hub is closed.
func (h *hub) subscribe() (ch chan []byte, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, false
	}
	ch = make(chan []byte, 1)
	h.clients[ch] = struct{}{}
	h.m.clients.Inc()
	return ch, true
}

func (h *hub) unsubscribe(ch chan []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.clients[ch]; ok {
		delete(h.clients, ch)
		h.m.clients.Dec()
	}
}

// close ends every stream. Safe to call twice.
func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed {
		h.closed = true
		close(h.done)
	}
}

// run pushes build's view on changes and every pushEvery until ctx ends.
func (h *hub) run(ctx context.Context, build func() View) {
	tick := time.NewTicker(pushEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.kick:
			// Coalesce a burst of changes into one push.
			select {
			case <-ctx.Done():
				return
			case <-time.After(pushDelay):
			}
		case <-tick.C:
		}
		h.mu.Lock()
		n := len(h.clients)
		h.mu.Unlock()
		if n == 0 {
			continue
		}
		b, err := json.Marshal(build())
		if err != nil {
			continue
		}
		h.broadcast(b)
	}
}

func (h *hub) broadcast(b []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.clients {
		select {
		case <-ch: // drop the unsent older view
		default:
		}
		ch <- b
		h.m.pushes.Inc()
	}
}
