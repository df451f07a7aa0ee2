package boundedrun

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/receiptflow/receiptflow/pkg/pipeline"
)

// DefaultStallTimeout is Config.StallTimeout when it is zero: a stage
// whose consumers acknowledge nothing new for a minute while it has work
// left cannot drain.
const DefaultStallTimeout = 60 * time.Second

// ErrStuck matches every *StuckError with errors.Is.
var ErrStuck = errors.New("pipeline stuck")

// StuckError says that a run could not drain: for Stall, no consumer of
// a stage with work left acknowledged a message it had not acknowledged
// before.
type StuckError struct {
	// Stall is how long nothing moved.
	Stall time.Duration
	// Stages are the stuck services (Validator, Windower, Publisher), in
	// pipeline order: those with a consumer whose backlog did not move, or
	// whose consumer does not exist.
	Stages []string
	// Backlog is the backlog (pending plus unacknowledged) of each stuck
	// consumer, by "STREAM/consumer".
	Backlog map[string]uint64
	// Missing lists the expected consumers that do not exist, by service.
	Missing map[string]int
	// Crashes is how often each service died and was restarted during the
	// stall (a service that keeps crashing on one message never moves).
	Crashes map[string]int
}

func (e *StuckError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "no progress for %v; stuck at %s", e.Stall, strings.Join(e.Stages, ", "))
	for _, svc := range e.Stages {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(e.Backlog)) {
			if serviceOf(k) == svc {
				parts = append(parts, fmt.Sprintf("%s backlog %d", k, e.Backlog[k]))
			}
		}
		if n := e.Missing[svc]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d consumers missing", n))
		}
		if n := e.Crashes[svc]; n > 0 {
			parts = append(parts, fmt.Sprintf("crashed %d times", n))
		}
		fmt.Fprintf(&b, "; %s: %s", svc, strings.Join(parts, ", "))
	}
	return b.String()
}

// Is makes errors.Is(err, ErrStuck) true.
func (e *StuckError) Is(target error) bool { return target == ErrStuck }

// serviceOf names the service of a "STREAM/consumer" key (the durable
// names of the services' consumers start with the service name).
func serviceOf(key string) string {
	_, name, _ := strings.Cut(key, "/")
	for _, svc := range []string{pipeline.Validator, pipeline.Windower, pipeline.Publisher} {
		if strings.HasPrefix(name, svc) {
			return svc
		}
	}
	return name
}

// drain waits until every consumer has processed everything in its stream
// (seen three polls in a row), as pipeline.WaitDrained does, but gives up
// with a *StuckError when a stage with work left made no progress for
// stall (DefaultStallTimeout if zero; negative: no bound; see doc.go).
func drain(ctx context.Context, p *pipeline.Pipeline, stall time.Duration) error {
	cfg := p.Config()
	if stall == 0 {
		stall = DefaultStallTimeout
	}
	want := pipeline.Expected(cfg.Services, cfg.Partitions)
	floors := map[string]uint64{} // highest ack floor seen, by consumer
	moved := map[string]time.Time{}
	crashesAt := map[string]map[string]int{}
	start, startCrashes := time.Now(), p.Crashes()
	for svc := range want {
		moved[svc], crashesAt[svc] = start, startCrashes
	}
	quiet := 0
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		cs, err := pipeline.Consumers(ctx, p.Admin.JS, p.Names)
		if err != nil {
			quiet = 0
			continue // e.g. the server restarting; try again
		}
		have := map[string]int{}
		busy := map[string]bool{} // stages with work left
		var total uint64
		for k, c := range cs {
			svc := serviceOf(k)
			have[svc]++
			total += c.Backlog
			if c.Backlog > 0 {
				busy[svc] = true
			}
			if f, seen := floors[k]; !seen || c.AckFloor > f {
				floors[k] = c.AckFloor
				moved[svc], crashesAt[svc] = time.Now(), p.Crashes()
			}
		}
		complete := true
		for svc, n := range want {
			if have[svc] < n {
				complete = false
				busy[svc] = true
			}
		}
		if complete && total == 0 {
			if quiet++; quiet >= 3 {
				return nil
			}
			continue
		}
		quiet = 0
		if stall < 0 {
			continue
		}
		var stuck []string
		for _, svc := range []string{pipeline.Validator, pipeline.Windower, pipeline.Publisher} {
			if busy[svc] && time.Since(moved[svc]) >= stall {
				stuck = append(stuck, svc)
			}
		}
		if len(stuck) == 0 {
			continue
		}
		e := &StuckError{Stall: stall, Stages: stuck, Backlog: map[string]uint64{}, Missing: map[string]int{}, Crashes: map[string]int{}}
		now := p.Crashes()
		for _, svc := range stuck {
			for k, c := range cs {
				if c.Backlog > 0 && serviceOf(k) == svc {
					e.Backlog[k] = c.Backlog
				}
			}
			if n := want[svc] - have[svc]; n > 0 {
				e.Missing[svc] = n
			}
			if d := now[svc] - crashesAt[svc][svc]; d > 0 {
				e.Crashes[svc] = d
			}
		}
		cfg.Logger.Error("run cannot drain", "stages", e.Stages, "backlog", e.Backlog, "crashes", e.Crashes, "stall", stall)
		return e
	}
}
