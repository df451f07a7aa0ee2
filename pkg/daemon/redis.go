package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/stream"
)

// errUnsafeRedis is the cause the guard stops a running service with.
var errUnsafeRedis = errors.New("redis turned unsafe")

// redisGuard keeps a service off a Redis that may evict keys, and follows
// its OOM refusals (docs/spec.md §4); /readyz, the log and metrics say why.
// Safe for concurrent use.
type redisGuard struct {
	rc    redis.UniversalClient
	h     *health
	log   *slog.Logger
	watch *connect.FullWatch

	unsafe *prometheus.GaugeVec

	mu      sync.Mutex
	checked bool                    // a verdict was recorded
	verdict string                  // the last one ("": safe)
	policy  string                  // the policy the gauge shows
	stop    context.CancelCauseFunc // stops the running service, nil when none runs
}

func newRedisGuard(svc string, rc redis.UniversalClient, h *health, reg prometheus.Registerer, log *slog.Logger) *redisGuard {
	ns := "receiptflow_" + svc + "_"
	g := &redisGuard{rc: rc, h: h, log: log,
		unsafe: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: ns + "redis_unsafe_eviction_policy",
			Help: "1 while Redis's maxmemory-policy (label policy; unknown: unreadable) is not noeviction: the service does not run."}, []string{"policy"}),
	}
	g.watch = connect.NewFullWatch(func(refused error) {
		if refused != nil {
			log.Warn("redis is full: writes are refused; the service waits with nothing acknowledged until memory is freed", "err", refused)
			return
		}
		log.Info("redis accepts writes again")
	})
	reg.MustRegister(g.unsafe,
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: ns + "redis_oom_total",
			Help: "Redis commands refused because Redis is at maxmemory (OOM replies)."},
			func() float64 { return float64(g.watch.Refusals()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: ns + "redis_full",
			Help: "1 while Redis refuses this service's writes for memory (OOM) and the service waits."},
			func() float64 { return b2f(g.watch.Full() != nil) }))
	rc.AddHook(g.watch)
	h.redisFull.Store(g.watch)
	return g
}

// check reads the policy once and returns the verdict: nil for noeviction,
// else why not. A running service is stopped on a non-nil verdict.
func (g *redisGuard) check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m, err := connect.ReadRedisMemory(ctx, g.rc)
	if err != nil && !errors.Is(err, connect.ErrPolicyUnknown) {
		return err // Redis is away: the ping and the restart loop see to that
	}
	if err == nil {
		err = connect.CheckEviction(m)
		if m.HasRoom() {
			g.watch.Freed()
		}
	}
	policy := m.Policy
	if policy == "" {
		policy = "unknown"
	}
	g.record(policy, m.Source, err)
	return err
}

// record shows the verdict on /readyz and the gauge, logs it when it
// changed, and stops a running service on an unsafe one.
func (g *redisGuard) record(policy, source string, verdict error) {
	msg := ""
	if verdict != nil {
		msg = verdict.Error()
	}
	g.h.redisRefused.Store(&msg)
	g.mu.Lock()
	defer g.mu.Unlock()
	if policy != g.policy {
		if g.policy != "" {
			g.unsafe.DeleteLabelValues(g.policy)
		}
		g.policy = policy
	}
	g.unsafe.WithLabelValues(policy).Set(b2f(verdict != nil))
	if verdict != nil && g.stop != nil {
		g.stop(fmt.Errorf("%w: %w", errUnsafeRedis, verdict))
	}
	first, changed := !g.checked, g.checked && msg != g.verdict
	g.checked, g.verdict = true, msg
	switch {
	case verdict != nil && (first || changed):
		g.log.Error("redis refused: the service does not run until maxmemory-policy is noeviction", "policy", policy, "source", source, "err", verdict)
	case verdict == nil && changed:
		g.log.Info("redis eviction policy is safe; the service starts", "policy", policy, "source", source)
	case verdict == nil && first:
		g.log.Info("redis eviction policy checked", "policy", policy, "source", source)
	}
}

// waitSafe returns nil once the policy is noeviction, or ctx's error;
// until then it reads it again with connect.WaitBackOff.
func (g *redisGuard) waitSafe(ctx context.Context) error {
	b := connect.WaitBackOff()
	for {
		err := g.check(ctx)
		if err == nil {
			return nil
		}
		if errors.Is(err, connect.ErrUnsafeEviction) || errors.Is(err, connect.ErrPolicyUnknown) {
			g.h.wait("") // /readyz names the policy (health.redisRefused)
		} else {
			g.h.wait("redis (eviction policy check): " + err.Error())
		}
		if perr := stream.Pause(ctx, b.NextBackOff()); perr != nil {
			return perr
		}
	}
}

// running returns the context a service runs under: ctx, also cancelled
// when the policy turns unsafe. Call done when the service has returned.
func (g *redisGuard) running(ctx context.Context) (run context.Context, done func()) {
	run, stop := context.WithCancelCause(ctx)
	g.mu.Lock()
	g.stop = stop
	if g.checked && g.verdict != "" { // turned unsafe since waitSafe returned
		stop(fmt.Errorf("%w: %s", errUnsafeRedis, g.verdict))
	}
	g.mu.Unlock()
	return run, func() {
		g.mu.Lock()
		g.stop = nil
		g.mu.Unlock()
		stop(nil)
	}
}
