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
)

// Reasons a watch session ends and the bucket is loaded again; they are
// the values of the reloads metric's reason label.
const (
	reasonReconnected = "reconnected"      // the connection reconnected (server restart)
	reasonClosed      = "watcher_closed"   // the KV watcher ended
	reasonSilent      = "silent"           // no KV update for the silence period
	reasonSwitched    = "generation_moved" // the active-generation pointer moved
	reasonError       = "error"            // the pointer or the bucket could not be read
)

// pollEvery is how often a watch session checks its connection, its
// silence and the generation pointer.
const pollEvery = 250 * time.Millisecond

// follow runs watch sessions until ctx ends, starting a new one (a full
// reload) whenever a session ends.
func (s *Service) follow(ctx context.Context) {
	silent := 0
	backoff := pollEvery
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
			backoff = pollEvery
		} else {
			backoff = min(2*backoff, 5*time.Second)
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
	}
}

// resolve returns the generation to show: the pinned one, else the
// active-generation pointer ("1" when there is none).
func (s *Service) resolve(ctx context.Context, ctrl jetstream.KeyValue) (string, error) {
	if s.cfg.Generation != "" {
		return s.cfg.Generation, nil
	}
	if ctrl == nil {
		return stream.DefaultGeneration, nil
	}
	e, err := ctrl.Get(ctx, stream.ActiveKey)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrKeyDeleted):
		return stream.DefaultGeneration, nil
	case err != nil:
		return "", fmt.Errorf("dashboard: read %s: %w", stream.ActiveKey, err)
	}
	var ptr struct {
		Generation string `json:"generation"`
	}
	if err := json.Unmarshal(e.Value(), &ptr); err != nil || ptr.Generation == "" {
		return "", fmt.Errorf("dashboard: %s holds %q, not {\"generation\":\"G\"}", stream.ActiveKey, e.Value())
	}
	return ptr.Generation, nil
}

// controlBucket returns the control bucket, or nil when it does not exist
// (or the generation is pinned).
func (s *Service) controlBucket(ctx context.Context) (jetstream.KeyValue, error) {
	if s.cfg.Generation != "" {
		return nil, nil
	}
	kv, err := s.js.KeyValue(ctx, stream.ControlBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	return kv, err
}

// session loads the active generation's bucket and follows it until
// something says the watch can no longer be trusted; it returns why.
func (s *Service) session(ctx context.Context, silence time.Duration) (string, error) {
	reconnects := s.nc.Stats().Reconnects
	if s.st.setConnected(s.nc.Status() == nats.CONNECTED) {
		s.hub.notify()
	}
	ctrl, err := s.controlBucket(ctx)
	if err != nil {
		return reasonError, err
	}
	gen, err := s.resolve(ctx, ctrl)
	if err != nil {
		return reasonError, err
	}
	kv, err := s.js.KeyValue(ctx, stream.For(gen).Bucket())
	if err != nil {
		return reasonError, fmt.Errorf("dashboard: bucket %s: %w", stream.For(gen).Bucket(), err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := kv.WatchAll(wctx)
	if err != nil {
		return reasonError, fmt.Errorf("dashboard: watch %s: %w", stream.For(gen).Bucket(), err)
	}
	defer w.Stop()

	staging := newContents() // the initial values, swapped in at once
	loaded := false
	lastSeen := time.Now()
	lastPointer := time.Now()
	tick := time.NewTicker(pollEvery)
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
		case <-tick.C:
			connected := s.nc.Status() == nats.CONNECTED
			if s.st.setConnected(connected) {
				s.hub.notify()
			}
			if s.nc.Stats().Reconnects != reconnects {
				return reasonReconnected, nil
			}
			if !connected {
				lastSeen = time.Now() // nothing to expect until reconnected
				continue
			}
			if time.Since(lastSeen) > silence {
				return reasonSilent, nil
			}
			if s.cfg.Generation == "" && time.Since(lastPointer) >= time.Second {
				lastPointer = time.Now()
				if ctrl == nil {
					if ctrl, err = s.controlBucket(ctx); err != nil {
						continue
					}
				}
				pctx, pcancel := context.WithTimeout(ctx, pollEvery*4)
				g, err := s.resolve(pctx, ctrl)
				pcancel()
				if err == nil && g != gen {
					return reasonSwitched, nil
				}
			}
		}
	}
}
