package daemon

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/lease"
	"github.com/receiptflow/receiptflow/pkg/ledger"
)

// errReassigned cancels a service's run when its partitions changed:
// leases taken or lost, or partitions to hand over (lease.Group.Excess).
var errReassigned = errors.New("the partitions this instance owns changed")

// groups is what a process in group mode adds to supervise: its member of
// the kind's group and the goroutine keeping it.
type groups struct {
	g    *lease.Group
	stop context.CancelFunc
	done chan struct{}
}

// joinGroup joins the kind's group of the generation (waiting for the
// lease bucket like for the streams) and starts keeping it.
func (p *process) joinGroup(ctx context.Context) (*groups, error) {
	var g *lease.Group
	bucket := p.d.Names.LeaseBucket()
	err := p.w.until(ctx, "the lease bucket (run the set-up job: --ensure-only)", bucket, func(ctx context.Context) error {
		lookCtx, cancel := p.refused.context(ctx, 10*time.Second)
		defer cancel()
		var err error
		g, err = lease.Join(lookCtx, p.d.NATS.JS, lease.Config{Bucket: bucket, Kind: p.name, Partitions: p.c.Partitions,
			TTL: p.o.leaseTTL, Info: p.port.Addr(), Logger: p.log})
		if err != nil && errors.Is(err, jetstream.ErrBucketNotFound) {
			return fmt.Errorf("%w: %w", connect.ErrNotYet, err)
		}
		return p.refused.or(err)
	})
	if err != nil {
		return nil, err
	}
	p.log.Info("joined the group", "member", g.ID(), "bucket", bucket, "lease_ttl", g.TTL())
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	gs := &groups{g: g, stop: stop, done: make(chan struct{})}
	go func() {
		defer close(gs.done)
		if err := g.Run(runCtx); err != nil {
			p.log.Error("lease group stopped", "err", err)
		}
	}()
	select {
	case <-g.Ready():
	case <-ctx.Done():
	}
	return gs, nil
}

// leave stops keeping the group and releases every lease: the service
// has stopped. Safe on a nil gs.
func (gs *groups) leave(p *process) {
	if gs == nil {
		return
	}
	gs.stop()
	<-gs.done
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := gs.g.Leave(ctx); err != nil {
		p.log.Warn("leaving the group: the leases left expire after their TTL", "err", err)
		return
	}
	p.log.Info("left the group: partitions handed over")
}

// takeOwned sets Deps.Owned and Epochs (and what /readyz, the metrics and
// the stats follow) to the partitions the group holds now.
func (p *process) takeOwned(gs *groups) {
	owned := gs.g.Owned()
	p.d.Owned = slices.Sorted(maps.Keys(owned))
	p.d.Epochs = owned
	p.setOwned(p.d.Owned)
}

// setOwned publishes owned to /readyz, the owned_partitions gauge and the
// stats.
func (p *process) setOwned(owned []int) {
	r := roleOf(p.name, p.d.Names, owned, p.c.Partitions)
	p.roles.Store(&r)
	p.h.setOwned(owned)
}

// watchOwnership cancels run with errReassigned once the group's
// partitions differ from running, or some are to hand over. It returns
// when run ends. It looks at once, on every Changed and every lease
// period: a signal can be taken by the watcher of the run before (its
// run ended as the signal came), and a lease not renewed in time leaves
// Owned without one.
func (gs *groups) watchOwnership(run context.Context, cancel context.CancelCauseFunc, running []int) {
	if gs == nil {
		return
	}
	go func() {
		t := time.NewTicker(gs.g.TTL() / 3)
		defer t.Stop()
		for {
			now := slices.Sorted(maps.Keys(gs.g.Owned()))
			if !slices.Equal(now, running) || len(gs.g.Excess()) > 0 {
				cancel(errReassigned)
				return
			}
			select {
			case <-run.Done():
				return
			case <-gs.g.Changed():
			case <-t.C:
			}
		}
	}()
}

// handOver releases what the group's target gives to others, after the
// service stopped (drained and checkpointed) them.
func (gs *groups) handOver(ctx context.Context, p *process) {
	ex := gs.g.Excess()
	if len(ex) == 0 {
		return
	}
	if err := gs.g.Release(ctx, ex...); err != nil {
		p.log.Warn("hand-over: the leases not released expire after their TTL", "err", err)
		return
	}
	p.log.Info("handed partitions over", "partitions", ex)
}

// lostPartition reports whether a service's error says a later owner holds
// one of its partitions (fenced): the daemon re-reads the leases.
func lostPartition(err error) bool { return errors.Is(err, ledger.ErrFenced) }

// idle is the service of a member that owns no partition: it waits.
type idle struct{}

func (idle) Run(ctx context.Context) error { <-ctx.Done(); return nil }

// ownedText is /readyz's line on owned partitions.
func ownedText(owned []int) string {
	if len(owned) == 0 {
		return "owned partitions: none"
	}
	s := make([]string, len(owned))
	for i, p := range owned {
		s[i] = strconv.Itoa(p)
	}
	return "owned partitions: " + strings.Join(s, ",")
}
