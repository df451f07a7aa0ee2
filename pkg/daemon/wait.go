package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/receiptflow/receiptflow/pkg/connect"
)

// waiter waits for a server (docs/spec.md §4): it retries with connect.WaitFor's
// capped, jittered backoff, logs every failed attempt with its error, and
// tells /readyz what it waits for. h may be nil (the set-up job serves no
// probes).
type waiter struct {
	log    *slog.Logger
	h      *health
	dialer connect.Dialer
}

// until runs op until it succeeds, fails for good, or ctx ends (see
// connect.WaitFor). what names the awaited thing in the log message and
// on /readyz; at says where it is (a redacted URL, a stream).
func (w waiter) until(ctx context.Context, what, at string, op func(context.Context) error) error {
	w.h.wait(what + " at " + at)
	return connect.WaitFor(ctx, op, func(attempt int, err error, next time.Duration) {
		w.h.wait(what + " at " + at + ": " + err.Error())
		w.log.Warn("waiting for "+what, "at", at, "attempt", attempt, "retry_in", next.Round(time.Millisecond).String(), "err", err)
	})
}

// connectNATS connects to url as name, waiting while no server answers.
func (w waiter) connectNATS(ctx context.Context, url, name string, opts []nats.Option) (*connect.Conn, error) {
	var conn *connect.Conn
	err := w.until(ctx, "nats", connect.RedactURL(url), func(context.Context) error {
		var err error
		conn, err = w.dialer.ConnectNATS(url, name, opts...)
		return err
	})
	return conn, err
}

// connectionLost reports whether the service's error came from a lost
// server: the error says so (connect.Transient), or a server does not
// answer now.
func (w waiter) connectionLost(ctx context.Context, err error, d *Deps) bool {
	if connect.Transient(err) {
		return true
	}
	return natsUp(d.NATS.NC) != nil || pingRedis(ctx, d.Redis) != nil
}

// stopped returns nil, after saying so, when ctx has ended (SIGTERM during
// a wait is a clean stop), else err.
func stopped(ctx context.Context, log *slog.Logger, err error) error {
	if ctx.Err() != nil {
		log.Info("stopped while waiting for the servers", "err", err)
		return nil
	}
	return err
}

// natsUp returns nil while nc is connected, else a transient error.
func natsUp(nc *nats.Conn) error {
	if nc.IsConnected() {
		return nil
	}
	return fmt.Errorf("%w (connection %s)", nats.ErrDisconnected, nc.Status())
}

// pingRedis pings rc, bounded by 5s.
func pingRedis(ctx context.Context, rc redis.UniversalClient) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return rc.Ping(ctx).Err()
}

// refusals records the permissions violations NATS reports (they arrive
// asynchronously: the refused request only times out), so that a wait
// ends at the first one instead of retrying the timeout forever.
type refusals struct{ r *connect.Refusals }

func newRefusals() *refusals { return &refusals{r: connect.NewRefusals()} }

func (r *refusals) note(err error) { r.r.Note(err) }

// context returns ctx bounded by timeout and cancelled at the first
// refusal.
func (r *refusals) context(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	rctx, rcancel := r.r.Context(ctx)
	return rctx, func() { rcancel(); cancel() }
}

// or returns the refusal (not transient) instead of err once there is
// one, else err.
func (r *refusals) or(err error) error {
	if err == nil {
		return nil
	}
	if ref := r.r.Err(); ref != nil {
		return fmt.Errorf("%w (%w)", ref, err)
	}
	return err
}

// ownedRegisterer registers on an underlying registerer and remembers
// what it registered, so that reset can unregister the gauges (the
// state of one build) before the service is built again; counters and
// histograms stay for the process's life, and the next build counts on
// in them (telemetry.Register). Safe for concurrent use.
type ownedRegisterer struct {
	prometheus.Registerer
	mu  sync.Mutex
	own []prometheus.Collector
}

var _ prometheus.Registerer = (*ownedRegisterer)(nil)

func (o *ownedRegisterer) Register(c prometheus.Collector) error {
	if err := o.Registerer.Register(c); err != nil {
		return err
	}
	o.mu.Lock()
	o.own = append(o.own, c)
	o.mu.Unlock()
	return nil
}

func (o *ownedRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := o.Register(c); err != nil {
			panic(err)
		}
	}
}

func (o *ownedRegisterer) Unregister(c prometheus.Collector) bool {
	return o.Registerer.Unregister(c)
}

// reset unregisters the gauges registered through o. A counter must not
// go back to zero within a process: in group mode the service is built
// again at every change of its partitions, right after the fenced run
// that fenced_writes_total counts.
func (o *ownedRegisterer) reset() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, c := range o.own {
		switch c.(type) {
		case prometheus.Gauge, *prometheus.GaugeVec:
			o.Registerer.Unregister(c)
		}
	}
	o.own = nil
}
