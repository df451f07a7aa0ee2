package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// Reasons a watch session ends and the bucket is loaded again; they are
// the values of the reloads metric's reason label.
const (
	reasonReconnected = "reconnected"      // the connection reconnected (server restart)
	reasonClosed      = "watcher_closed"   // the KV watcher ended
	reasonSilent      = "silent"           // no KV update for the silence period, and the bucket moved past the watch
	reasonSwitched    = "generation_moved" // the active-generation pointer moved
	reasonError       = "error"            // the pointer or the bucket could not be read
)

// pollEvery paces the restarts of watch sessions and bounds their
// look-ups.
const pollEvery = 250 * time.Millisecond

// checkEvery is how often a watch session checks its silence and the
// generation pointer; its connection it checks on every status change
// nats.go reports, and on these ticks too.
const checkEvery = time.Second

// follow runs watch sessions until ctx ends, starting a new one (a full
// reload) whenever a session ends.
func (s *Service) follow(ctx context.Context) {
	silent := 0
	// After a long session, a pointer move or a reconnect the next session
	// starts after pollEvery; short sessions in a row wait twice as long
	// each time, up to 5s.
	pause := stream.Backoff{Initial: pollEvery, Max: 5 * time.Second}.BackOff()
	pause.NextBackOff() // the first short session waits 2×pollEvery, as one after a reset
	for ctx.Err() == nil {
		began := time.Now()
		reason, err := s.session(ctx, s.cfg.Silence<<min(silent, 4))
		if ctx.Err() != nil {
			return
		}
		if reason == reasonSilent {
			silent++
		} else {
			silent = 0
		}
		s.st.noteReload(reason, s.cfg.Now())
		s.m.reloads.WithLabelValues(reason).Inc()
		s.hub.notify()
		log := s.cfg.Logger.Info
		if err != nil {
			log = s.cfg.Logger.Warn
		}
		log("dashboard: watching the bucket again", "reason", reason, "err", err)
		if time.Since(began) > 10*time.Second || reason == reasonSwitched || reason == reasonReconnected {
			pause.Reset()
		}
		_ = stream.Pause(ctx, pause.NextBackOff()) // the loop ends on ctx
	}
}

// resolve returns the generation to show: the pinned one, else the
// active-generation pointer ("1" when there is none).
func (s *Service) resolve(ctx context.Context, ctrl jetstream.KeyValue) (string, error) {
	if s.cfg.Generation != "" {
		return s.cfg.Generation, nil
	}
	if ctrl == nil {
		return wire.DefaultGeneration, nil
	}
	e, err := ctrl.Get(ctx, wire.ActiveKey)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrKeyDeleted):
		return wire.DefaultGeneration, nil
	case err != nil:
		return "", fmt.Errorf("dashboard: read %s: %w", wire.ActiveKey, err)
	}
	var ptr struct {
		Generation string `json:"generation"`
	}
	if err := json.Unmarshal(e.Value(), &ptr); err != nil || ptr.Generation == "" {
		return "", fmt.Errorf("dashboard: %s holds %q, not {\"generation\":\"G\"}", wire.ActiveKey, e.Value())
	}
	return ptr.Generation, nil
}

// controlBucket returns the control bucket, or nil when it does not exist
// (or the generation is pinned).
func (s *Service) controlBucket(ctx context.Context) (jetstream.KeyValue, error) {
	if s.cfg.Generation != "" {
		return nil, nil
	}
	kv, err := s.js.KeyValue(ctx, wire.ControlBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	return kv, err
}

// withoutDeadline returns a context that ends with ctx but has no
// deadline, so that the NATS client bounds each request made with it by its
// own default timeout (5s). A request written to a connection the server
// has just dropped is never answered; with ctx's deadline, which may be far
// away, it would hold the session (and the reconnect check) until then.
func withoutDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	c, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	return c, func() {
		stop()
		cancel()
	}
}

// stopWatch stops w and discards what it still delivers. Stopping deletes
// the watch's consumer, a request that waits for the client's timeout when
// the server is away, and the watcher's delivery blocks while its channel
// is full; run it in its own goroutine so that neither holds up the next
// session or Run's return. It returns once the watcher's channel is closed.
func stopWatch(w jetstream.KeyWatcher) {
	w.Stop()
	for range w.Updates() {
	}
}

// session loads the active generation's bucket and follows it until
// something says the watch can no longer be trusted; it returns why.
func (s *Service) session(ctx context.Context, silence time.Duration) (string, error) {
	// Read the counter before the watch exists: a reconnect at any later
	// moment, even during the setup below, ends this session.
	reconnects := s.nc.Stats().Reconnects
	if s.st.setConnected(s.nc.Status() == nats.CONNECTED) {
		s.hub.notify()
	}
	wctx, cancel := withoutDeadline(ctx)
	defer cancel()
	ctrl, err := s.controlBucket(wctx)
	if err != nil {
		return reasonError, err
	}
	gen, err := s.resolve(wctx, ctrl)
	if err != nil {
		return reasonError, err
	}
	kv, err := s.js.KeyValue(wctx, wire.For(gen).Bucket())
	if err != nil {
		return reasonError, fmt.Errorf("dashboard: bucket %s: %w", wire.For(gen).Bucket(), err)
	}
	w, err := kv.WatchAll(wctx)
	if err != nil {
		return reasonError, fmt.Errorf("dashboard: watch %s: %w", wire.For(gen).Bucket(), err)
	}
	defer func() { go stopWatch(w) }()

	staging := newContents() // the initial values, swapped in at once
	loaded := false
	var lastRev uint64 // the latest revision the watch delivered
	lastSeen := time.Now()
	statuses := s.nc.StatusChanged()
	defer s.nc.RemoveStatusListener(statuses)
	// connection follows the connection: false when the session must end
	// (it reconnected), and whether it is connected now.
	connection := func() (goOn, connected bool) {
		connected = s.nc.Status() == nats.CONNECTED
		if s.st.setConnected(connected) {
			s.hub.notify()
		}
		return s.nc.Stats().Reconnects == reconnects, connected
	}
	tick := time.NewTicker(checkEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return "", nil
		case e, ok := <-w.Updates():
			if !ok {
				return reasonClosed, nil
			}
			lastSeen = time.Now()
			if e != nil {
				lastRev = max(lastRev, e.Revision())
			}
			switch {
			case e == nil:
				if !loaded {
					loaded = true
					s.st.replace(gen, staging, s.cfg.Now())
					s.m.loads.Inc()
					s.hub.notify()
				}
			case !loaded:
				if _, _, err := staging.apply(e); err != nil {
					s.m.badEntries.Inc()
				}
			default:
				changed, err := s.st.apply(e, s.cfg.Now())
				if err != nil {
					s.m.badEntries.Inc()
					s.cfg.Logger.Warn("dashboard: unreadable entry", "key", e.Key(), "err", err)
				}
				s.m.updates.Inc()
				if changed {
					s.hub.notify()
				}
			}
		case <-statuses:
			if goOn, connected := connection(); !goOn {
				return reasonReconnected, nil
			} else if !connected {
				lastSeen = time.Now() // nothing to expect until reconnected
			}
		case <-tick.C:
			goOn, connected := connection()
			if !goOn {
				return reasonReconnected, nil
			}
			if !connected {
				lastSeen = time.Now() // nothing to expect until reconnected
				continue
			}
			if time.Since(lastSeen) > silence {
				// A quiet bucket (an idle source: the publisher then
				// rewrites meta.* only every keep-alive) is no reason
				// to watch again; a bucket that moved past the watch is.
				behind, err := s.watchBehind(ctx, kv, lastRev)
				if err != nil || behind {
					return reasonSilent, err
				}
				lastSeen = time.Now()
				s.st.noteQuiet()
				s.m.quietChecks.Inc()
			}
			if s.cfg.Generation == "" {
				if s.pointerMoved(ctx, &ctrl, gen) {
					return reasonSwitched, nil
				}
			}
		}
	}
}

// watchBehind reports whether kv holds a revision later than rev, the
// latest one the watch delivered: a watch that missed an update. The
// look-up is bounded like pointerMoved's; a failed one is returned.
func (s *Service) watchBehind(ctx context.Context, kv jetstream.KeyValue, rev uint64) (bool, error) {
	sctx, cancel := context.WithTimeout(ctx, pollEvery*4)
	defer cancel()
	st, err := kv.Status(sctx)
	if err != nil {
		return false, fmt.Errorf("dashboard: status of %s: %w", kv.Bucket(), err)
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return true, nil // cannot tell: watch again
	}
	state := bs.StreamInfo().State
	return state.Msgs > 0 && state.LastSeq > rev, nil
}

// pointerMoved reports whether the active-generation pointer now names
// another generation than gen, looking the control bucket up first if *ctrl
// is nil. A failed look-up reports false; it is bounded so that the watch
// loop goes on within a second.
func (s *Service) pointerMoved(ctx context.Context, ctrl *jetstream.KeyValue, gen string) bool {
	pctx, cancel := context.WithTimeout(ctx, pollEvery*4)
	defer cancel()
	if *ctrl == nil {
		c, err := s.controlBucket(pctx)
		if err != nil {
			return false
		}
		*ctrl = c // nil while there is no control bucket: resolve says "1"
	}
	g, err := s.resolve(pctx, *ctrl)
	return err == nil && g != gen
}
