// Package config holds the flags every receiptflow command shares
// (docs/spec.md §6: --partitions --lateness --grace --stale-after --max-future-skew
// --nats-url --redis-url --failpoints), with their environment fallbacks.
package config

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/failpoint"
	"github.com/receiptflow/receiptflow/pkg/stream"
)

// Common is the shared configuration.
type Common struct {
	// Params are the parameters the deployment records (Params.Record).
	Params
	StaleAfter time.Duration
	NATSURL    string
	RedisURL   string
	Failpoints string
	Generation string
	// Retention is how long the streams keep their messages (MaxAge,
	// docs/spec.md §4): the replay horizon of operators. Never 0, so no
	// stream is kept forever by accident.
	Retention time.Duration
	// DedupWindow is JetStream's duplicate window on RAW and VALID.
	DedupWindow time.Duration
	// LatencyBudget is what the hops may add, together, by waiting for
	// batches to fill and for progress to be polled (Waits).
	LatencyBudget time.Duration
	// WindowRetention is how far (event time) behind the newest window a
	// final, retired window snapshot is kept in the KV bucket before the
	// publisher prunes it (its day rollup stays). Never 0, and at least
	// Grace + ReplayHorizon.
	WindowRetention time.Duration
	// DayRetention is the same for the day rollups; at least
	// WindowRetention.
	DayRetention time.Duration
}

// DefaultWindowRetention is --window-retention's default: 30 days.
const DefaultWindowRetention = 720 * time.Hour

// DefaultDayRetention is --day-retention's default: 365 days.
const DefaultDayRetention = 8760 * time.Hour

// DefaultLatencyBudget is --latency-budget's default.
const DefaultLatencyBudget = 25 * time.Millisecond

// MaxLatencyBudget is the largest --latency-budget accepted.
const MaxLatencyBudget = time.Minute

// Waits are the waits a latency budget allows each hop.
type Waits struct {
	// IngestLinger: how long ingest's sender waits for an atomic batch to
	// fill (ingest.Config.Linger).
	IngestLinger time.Duration
	// PublishLinger: how long the publisher waits for more change notices
	// after the first.
	PublishLinger time.Duration
	// BarrierIdle: how often the validator advances an idle partition's
	// claim progress; BarrierPoll: how often a partition waiting at the
	// publication barrier reads the progress of partitions other
	// instances run (validator.Config).
	BarrierIdle, BarrierPoll time.Duration
	// ConsumeLinger: how long a validator or windower batch waits for
	// more messages after its first when none are buffered
	// (stream.BatchConfig.Linger).
	ConsumeLinger time.Duration
}

// WaitsFor splits budget over the hops that wait. A waiting hop adds at
// most about its wait, the barrier up to two ticks; the bounds keep a
// tiny budget from turning waits into busy polling and a large one from
// waiting longer than the releases before the budget did.
func WaitsFor(budget time.Duration) Waits {
	clamp := func(d, lo, hi time.Duration) time.Duration { return min(max(d, lo), hi) }
	return Waits{
		IngestLinger:  clamp(budget/5, time.Millisecond, 20*time.Millisecond),
		PublishLinger: clamp(budget/5, time.Millisecond, 5*time.Millisecond),
		BarrierIdle:   clamp(budget/3, 5*time.Millisecond, 50*time.Millisecond),
		BarrierPoll:   clamp(budget/5, 2*time.Millisecond, 20*time.Millisecond),
		ConsumeLinger: clamp(budget/25, 250*time.Microsecond, time.Millisecond),
	}
}

// Waits returns the waits of --latency-budget.
func (c *Common) Waits() Waits { return WaitsFor(c.LatencyBudget) }

// DefaultRetention is --retention's default: 7 days.
const DefaultRetention = stream.DefaultMaxAge

// Register adds the shared flags to fs, defaulting from NATS_URL,
// REDIS_URL and RECEIPTS_FAILPOINTS.
func (c *Common) Register(fs *flag.FlagSet) {
	c.Params.Register(fs)
	fs.DurationVar(&c.StaleAfter, "stale-after", 2*time.Minute, "wall-clock silence of the source after which readers are told the data is stale")
	fs.StringVar(&c.NATSURL, "nats-url", os.Getenv("NATS_URL"), "NATS server URL (env NATS_URL); empty starts an embedded server where the command supports it")
	fs.StringVar(&c.RedisURL, "redis-url", os.Getenv("REDIS_URL"), "Redis URL redis://host:port (env REDIS_URL); empty starts an embedded miniredis where the command supports it")
	fs.StringVar(&c.Failpoints, "failpoints", os.Getenv(failpoint.Env), "failpoints NAME=crash@every:N,... (env "+failpoint.Env+")")
	fs.StringVar(&c.Generation, "generation", "1", "state generation to write (rebuilds use a new one)")
	fs.DurationVar(&c.Retention, "retention", envDuration("RECEIPTS_RETENTION", DefaultRetention),
		"how long the streams keep their messages, the window for replays from sequence numbers (env RECEIPTS_RETENTION); applied when the streams are created or updated")
	fs.DurationVar(&c.DedupWindow, "dedup-window", envDuration("RECEIPTS_DEDUP_WINDOW", stream.DefaultDupWindow),
		"JetStream's duplicate window on RAW and VALID: a retry with the same Nats-Msg-Id within it is stored once (env RECEIPTS_DEDUP_WINDOW)")
	fs.DurationVar(&c.LatencyBudget, "latency-budget", envDuration("RECEIPTS_LATENCY_BUDGET", DefaultLatencyBudget),
		"what waiting for batches and progress may add to an event's way from ingest to the KV bucket (env RECEIPTS_LATENCY_BUDGET); shorter costs more CPU when the load is light")
	fs.DurationVar(&c.WindowRetention, "window-retention", envDuration("RECEIPTS_WINDOW_RETENTION", DefaultWindowRetention),
		"event time behind the newest window after which a final window whose state is retired is pruned from the KV bucket; its day rollup keeps its counts (env RECEIPTS_WINDOW_RETENTION; at least --grace + --replay-horizon)")
	fs.DurationVar(&c.DayRetention, "day-retention", envDuration("RECEIPTS_DAY_RETENTION", DefaultDayRetention),
		"event time behind the newest window after which a final day rollup is pruned from the KV bucket (env RECEIPTS_DAY_RETENTION; at least --window-retention)")
}

// Validate checks the values.
func (c *Common) Validate() error {
	if err := c.Params.Validate(); err != nil {
		return err
	}
	switch {
	case c.StaleAfter <= 0:
		return fmt.Errorf("--stale-after must be positive")
	case c.Retention <= 0:
		return fmt.Errorf("--retention must be positive (streams are never kept forever by accident), got %s", c.Retention)
	case c.DedupWindow <= 0:
		return fmt.Errorf("--dedup-window must be positive, got %s", c.DedupWindow)
	case c.LatencyBudget <= 0 || c.LatencyBudget > MaxLatencyBudget:
		return fmt.Errorf("--latency-budget must be between 0 and 1m, got %s", c.LatencyBudget)
	case c.WindowRetention <= 0 || c.WindowRetention < c.Grace+c.ReplayHorizon:
		return fmt.Errorf("--window-retention %s must be at least --grace + --replay-horizon (%s): a window is pruned only once its state is retired", c.WindowRetention, c.Grace+c.ReplayHorizon)
	case c.DayRetention < c.WindowRetention:
		return fmt.Errorf("--day-retention %s must be at least --window-retention %s", c.DayRetention, c.WindowRetention)
	case c.DedupWindow > c.Retention:
		return fmt.Errorf("--dedup-window %s must not be longer than --retention %s", c.DedupWindow, c.Retention)
	case c.Generation == "" || strings.ContainsAny(c.Generation, ".*> {}:"):
		return fmt.Errorf("--generation %q must be a plain name like 2", c.Generation)
	}
	_, err := failpoint.Parse(c.Failpoints, failpoint.InProcess)
	return err
}

// Topology returns the stream settings the flags set, with the
// parameters to record for c.Generation (replicas are the deployment's:
// 0 means 1).
func (c *Common) Topology(replicas int) stream.Config {
	return stream.Config{Partitions: c.Partitions, DupWindow: c.DedupWindow, Replicas: replicas, MaxAge: c.Retention,
		RowsAge: c.WindowRetention, Record: c.Params.Record(c.Generation)}
}

// AdoptRecorded takes c.Generation's parameters recorded on RAW into c
// (Params.Adopt; explicit names the flags given) and validates c. With
// no record c keeps its values. Safe to call again.
func (c *Common) AdoptRecorded(ctx context.Context, js jetstream.JetStream, explicit func(flag string) bool) error {
	meta, err := Recorded(ctx, js)
	if err != nil {
		return err
	}
	if _, err := c.Params.Adopt(meta, c.Generation, explicit); err != nil {
		return err
	}
	return c.Validate()
}

// envDuration reads a duration from the environment, def when unset or
// unreadable (the flag's own parse then names a bad value given on the
// command line).
func envDuration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return d
	}
	return def
}

// ParseOwned parses a partition list like "0,1,4-7"; "" means all.
func ParseOwned(s string, partitions int) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("bad partition %q", part)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return nil, fmt.Errorf("bad partition range %q", part)
			}
		}
		for p := a; p <= b; p++ {
			if p < 0 || p >= partitions {
				return nil, fmt.Errorf("partition %d is outside 0..%d", p, partitions-1)
			}
			out = append(out, p)
		}
	}
	return out, nil
}

// Split returns the partitions instance i of n owns (p mod n == i).
func Split(partitions, i, n int) []int {
	var out []int
	for p := 0; p < partitions; p++ {
		if p%n == i {
			out = append(out, p)
		}
	}
	return out
}
