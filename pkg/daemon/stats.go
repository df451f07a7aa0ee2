package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/receiptflow/receiptflow/pkg/internal/telemetry"
	"github.com/receiptflow/receiptflow/pkg/service"
	"github.com/receiptflow/receiptflow/pkg/window"
)

// stats samples, every interval, what a service's own counters cannot see:
// the backlog of its consumers (pending, unacknowledged, redelivered), the
// state size and watermark in Redis, and whether Redis answers and is safe
// (its eviction policy, for /readyz). Every gauge is named receiptflow_<svc>_*.
type stats struct {
	r     role
	roles *atomic.Pointer[role] // the role now, when it changes (group mode)
	d     *Deps
	h     *health
	guard *redisGuard
	log   *slog.Logger

	backlog    *service.BacklogGauges
	entries    *prometheus.GaugeVec
	windows    *prometheus.GaugeVec
	watermark  *prometheus.GaugeVec
	lag        *prometheus.GaugeVec
	redisUp    prometheus.Gauge
	sampleErrs prometheus.Counter

	// stallAfter bounds how long a consumer may go without progress
	// (see progress) before /readyz says so.
	stallAfter time.Duration
	marks      map[consumerRef]*progress
	sampled    time.Time // the previous sample
	moved      time.Time // the last MoveOn
}

// progress is what the samples saw of one consumer: its ack floor, when
// it last moved (or the consumer was idle: nothing pending), and when its
// leader last answered.
type progress struct {
	floor    uint64
	moved    time.Time
	answered time.Time
}

func newStats(svc string, r role, d *Deps, h *health, guard *redisGuard, reg prometheus.Registerer, log *slog.Logger) *stats {
	ns := "receiptflow_" + svc + "_"
	part := []string{"partition"}
	if !r.perPartition {
		part = nil
	}
	s := &stats{r: r, d: d, h: h, guard: guard, log: log, marks: map[consumerRef]*progress{},
		backlog: service.NewBacklogGauges(svc, reg),
		entries: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: ns + "state_ledger_entries",
			Help: "Dedup ledger entries held in Redis (state size)."}, part),
		windows: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: ns + "state_windows",
			Help: "Windows held in Redis (state size)."}, part),
		watermark: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: ns + "checkpoint_watermark_timestamp_seconds",
			Help: "Watermark in the Redis checkpoint, a Unix time in seconds (the publisher: the global watermark, the minimum over partitions)."}, part),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: ns + "watermark_lag_seconds",
			Help: "Wall clock minus the checkpoint watermark: how far event time trails real time."}, part),
		redisUp: prometheus.NewGauge(prometheus.GaugeOpts{Name: ns + "redis_up",
			Help: "1 when the last Redis ping succeeded."}),
		sampleErrs: prometheus.NewCounter(prometheus.CounterOpts{Name: ns + "stats_errors_total",
			Help: "Failed samples of consumer backlog or state size."}),
	}
	nc := d.NATS.NC
	reg.MustRegister(s.redisUp, s.sampleErrs,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: ns + "nats_connected", Help: "1 while connected to NATS."},
			func() float64 { return b2f(nc.IsConnected()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: ns + "nats_reconnects_total", Help: "NATS reconnections."},
			func() float64 { return float64(nc.Stats().Reconnects) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: ns + "ready", Help: "1 while /readyz answers 200."},
			func() float64 { return b2f(h.notReady() == "") }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: ns + "broker_store_full",
			Help: "1 while the broker refuses this service's writes because its store is full (max_file_store, an account or stream limit): the service waits and acknowledges nothing."},
			func() float64 { return b2f(h.storeFull()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: ns + "broker_store_refusals_total",
			Help: "Writes of this service the broker refused because its store was full."},
			func() float64 { return float64(h.full.Refusals() + h.fullRestarts.Load()) }),
	)
	if r.name == "validator" || r.name == "windower" {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: ns + "owned_partitions",
			Help: "Partitions this instance processes now (its leases in a group; --instance/--instances or --owned otherwise)."},
			func() float64 { return float64(len(h.ownedNow())) }))
	}
	if len(r.state) > 0 || r.perPartition {
		reg.MustRegister(s.entries, s.windows, s.watermark, s.lag,
			// The former name, exported alongside for one release (CHANGELOG.md).
			telemetry.Renamed(s.watermark, ns+"checkpoint_watermark_seconds", ns+"checkpoint_watermark_timestamp_seconds", part...))
	}
	return s
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func (s *stats) loop(ctx context.Context, every time.Duration) {
	s.h.maxAge.Store(int64(3 * every))
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		s.sample(ctx, every)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// follow takes the role of the partitions owned now: the gauges of
// consumers and partitions no longer owned are dropped.
func (s *stats) follow() {
	if s.roles == nil {
		return
	}
	r := s.roles.Load()
	if r == nil || slices.Equal(r.consumers, s.r.consumers) && slices.Equal(r.state, s.r.state) {
		return
	}
	s.r = *r
	s.backlog.Reset()
	if s.r.perPartition {
		for _, g := range []*prometheus.GaugeVec{s.entries, s.windows, s.watermark, s.lag} {
			g.Reset()
		}
	}
	s.marks = map[consumerRef]*progress{}
}

func (s *stats) sample(ctx context.Context, every time.Duration) {
	s.follow()
	ctx, cancel := context.WithTimeout(ctx, every)
	defer cancel()
	if err := s.d.Redis.Ping(ctx).Err(); err == nil {
		s.h.redisOK.Store(time.Now().UnixNano())
		s.redisUp.Set(1)
		_ = s.guard.check(ctx) // the eviction policy, and whether memory was freed
	} else {
		s.redisUp.Set(0)
	}
	now := time.Now()
	if now.Sub(s.sampled) > 2*every {
		// The first sample, or this process was stalled itself (SIGSTOP,
		// a long pause): what it saw before says nothing now.
		for _, m := range s.marks {
			m.moved, m.answered = now, now
		}
	}
	s.sampled = now
	for _, c := range s.r.consumers {
		m := s.marks[c]
		if m == nil {
			m = &progress{moved: now, answered: now}
			s.marks[c] = m
		}
		cons, err := s.d.NATS.JS.Consumer(ctx, c.Stream, c.Durable)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			m.moved, m.answered = now, now // not made yet, or being made again
		}
		if err != nil {
			if ctx.Err() == nil {
				s.sampleErrs.Inc()
			}
			continue
		}
		ci := cons.CachedInfo()
		if ci.Cluster == nil || ci.Cluster.Leader != "" {
			m.answered = now // a replica answering on its own names no leader
		}
		if ci.NumPending == 0 && ci.NumAckPending == 0 || ci.AckFloor.Stream != m.floor {
			m.moved = now
		}
		m.floor = ci.AckFloor.Stream
		s.backlog.Set(ci)
	}
	s.judgeProgress(now)
	if len(s.r.state) == 0 {
		return
	}
	var totalEntries, totalWindows float64
	global := int64(-1)
	for _, p := range s.r.state {
		ck, err := s.d.Store.Checkpoint(ctx, p)
		if err != nil {
			s.sampleErrs.Inc()
			return
		}
		n, err := s.d.Redis.ZCard(ctx, s.d.Store.Keys().Index(p)).Result()
		if err != nil {
			s.sampleErrs.Inc()
			return
		}
		if s.r.perPartition {
			l := strconv.Itoa(p)
			s.entries.WithLabelValues(l).Set(float64(ck.Entries))
			s.windows.WithLabelValues(l).Set(float64(n))
			setWatermark(s.watermark.WithLabelValues(l), s.lag.WithLabelValues(l), ck.Watermark, now)
		}
		totalEntries += float64(ck.Entries)
		totalWindows += float64(n)
		if global < 0 || ck.Watermark < global {
			global = ck.Watermark
		}
	}
	if !s.r.perPartition {
		s.entries.WithLabelValues().Set(totalEntries)
		s.windows.WithLabelValues().Set(totalWindows)
		setWatermark(s.watermark.WithLabelValues(), s.lag.WithLabelValues(), global, now)
	}
}

// judgeProgress tells /readyz whether the service makes progress: not
// when a consumer's leader has not answered for stallAfter (the server the
// service is connected to cannot reach it: a node cut off from its peers
// still answers pings), or when a consumer with messages pending has not
// moved its ack floor for stallAfter. In the first case, with Redis
// answering, the connection also moves to another server (connect.MoveOn),
// at most once per stallAfter.
func (s *stats) judgeProgress(now time.Time) {
	reason := ""
	unreachable := false
	for _, c := range s.r.consumers {
		m := s.marks[c]
		if m == nil {
			continue
		}
		switch {
		case now.Sub(m.answered) > s.stallAfter:
			reason = fmt.Sprintf("no answer from the leader of consumer %s on %s for %s", c.Durable, c.Stream, now.Sub(m.answered).Round(time.Second))
			unreachable = true
		case reason == "" && now.Sub(m.moved) > s.stallAfter:
			reason = fmt.Sprintf("consumer %s on %s has messages pending and made no progress for %s", c.Durable, c.Stream, now.Sub(m.moved).Round(time.Second))
		}
	}
	s.h.stalled.Store(&reason)
	if !unreachable || now.Sub(s.moved) < s.stallAfter || !s.d.NATS.NC.IsConnected() ||
		time.Duration(now.UnixNano()-s.h.redisOK.Load()) > s.stallAfter {
		return
	}
	s.moved = now
	s.log.Warn("no progress: leaving the NATS server for another one", "reason", reason, "server", s.d.NATS.NC.ConnectedServerName())
	if err := s.d.NATS.MoveOn(); err != nil {
		s.log.Warn("nats: move to another server", "err", err)
	}
}

// setWatermark sets the watermark gauge and the lag; a partition with no
// data yet has neither, and one closed by the end-of-stream heartbeat (a
// watermark in year 9999) has no lag.
func setWatermark(wm, lag prometheus.Gauge, ms int64, now time.Time) {
	if ms <= window.NoWatermark {
		return
	}
	wm.Set(float64(ms) / 1000)
	lag.Set(max(0, now.Sub(time.UnixMilli(ms)).Seconds()))
}
