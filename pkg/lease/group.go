package lease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/wire"
)

// DefaultTTL is --lease-ttl's default.
const DefaultTTL = 10 * time.Second

// Config is what a Group needs.
type Config struct {
	Bucket     string // the generation's lease bucket (wire.Names.LeaseBucket)
	Kind       string // the group: validator or windower
	ID         string // this member's id ("" : NewID)
	Partitions int
	TTL        time.Duration // lease and membership TTL (rounded up to whole seconds)
	Info       string        // what the member key says of it (an address)
	Logger     *slog.Logger
}

// Group is one member of a kind's group. Owned, Excess and Changed are safe
// for concurrent use with Run, Release and Leave.
type Group struct {
	cfg    Config
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	ttl    time.Duration
	period time.Duration // renewal period: ttl/3
	since  time.Time

	wake    chan struct{} // the watcher saw a change
	changed chan struct{} // Owned or Excess changed (capacity 1)
	ready   chan struct{} // closed after the first step
	once    sync.Once

	op sync.Mutex // serialises the writes: step, Release, Leave

	mu      sync.Mutex
	members map[string]bool  // live members, from the watcher
	holders map[int]string   // current lease holders, from the watcher
	held    map[int]*holding // this member's leases
	target  map[int]string
	synced  bool
	left    bool
}

// holding is one lease this member holds.
type holding struct {
	epoch, rev uint64
	acquired   time.Time
	// until is when this member stops counting the lease as held unless
	// renewed: send time of the last successful write + ttl - period.
	until time.Time
}

// Join returns a member of cfg.Kind's group in the bucket; it does no
// write until Run.
func Join(ctx context.Context, js jetstream.JetStream, cfg Config) (*Group, error) {
	if cfg.Partitions < 1 || cfg.Kind == "" || cfg.Bucket == "" {
		return nil, fmt.Errorf("lease: bad config (kind %q, bucket %q, %d partitions)", cfg.Kind, cfg.Bucket, cfg.Partitions)
	}
	if cfg.ID == "" {
		cfg.ID = NewID()
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if err != nil {
		return nil, fmt.Errorf("lease: open bucket %s: %w", cfg.Bucket, err)
	}
	ttl := ttlOf(cfg.TTL)
	return &Group{cfg: cfg, js: js, kv: kv, ttl: ttl, period: ttl / 3, since: time.Now(),
		wake: make(chan struct{}, 1), changed: make(chan struct{}, 1), ready: make(chan struct{}),
		members: map[string]bool{}, holders: map[int]string{}, held: map[int]*holding{}}, nil
}

// ID is this member's id.
func (g *Group) ID() string { return g.cfg.ID }

// TTL is the lease TTL in effect (whole seconds).
func (g *Group) TTL() time.Duration { return g.ttl }

// Changed receives when the partitions held or the excess change: the
// service should stop, Release the Excess, and start again with Owned.
func (g *Group) Changed() <-chan struct{} { return g.changed }

// Ready is closed once Run has seen the bucket and taken what it could
// of its target the first time.
func (g *Group) Ready() <-chan struct{} { return g.ready }

// Owned returns the partitions held now and their epochs.
func (g *Group) Owned() map[int]uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	out := make(map[int]uint64, len(g.held))
	for p, h := range g.held {
		if now.Before(h.until) {
			out[p] = h.epoch
		}
	}
	return out
}

// Excess returns the held partitions the group's target gives to others,
// ascending: the ones to Release once the service stopped them.
func (g *Group) Excess() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []int
	for p := range g.held {
		if g.target != nil && g.target[p] != g.cfg.ID {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// Run keeps the membership and the leases until ctx ends: it renews every
// TTL/3, takes free partitions of its target as soon as the watcher shows
// them, and drops a lease it could not renew in time. It returns nil when
// ctx ends (the leases stay until Leave or their TTL); an error when the
// bucket cannot be watched.
func (g *Group) Run(ctx context.Context) error {
	w, err := g.kv.Watch(ctx, g.cfg.Kind+".>")
	if err != nil {
		return fmt.Errorf("lease: watch %s: %w", g.cfg.Bucket, err)
	}
	defer w.Stop()
	go g.watch(ctx, w)
	t := time.NewTicker(g.period)
	defer t.Stop()
	renew := true
	for {
		if g.isSynced() {
			g.step(ctx, renew)
			renew = false
			g.once.Do(func() { close(g.ready) })
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			renew = true
		case <-g.wake:
		}
	}
}

func (g *Group) isSynced() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.synced
}

// watch keeps members and holders as the bucket says.
func (g *Group) watch(ctx context.Context, w jetstream.KeyWatcher) {
	for {
		var e jetstream.KeyValueEntry
		select {
		case <-ctx.Done():
			return
		case e = <-w.Updates():
		}
		g.mu.Lock()
		if e == nil {
			g.synced = true
		} else {
			g.apply(e)
		}
		g.mu.Unlock()
		select {
		case g.wake <- struct{}{}:
		default:
		}
	}
}

// apply records entry e in the view. g.mu held.
func (g *Group) apply(e jetstream.KeyValueEntry) {
	_, what, rest, ok := parseKey(e.Key())
	if !ok {
		return
	}
	put := e.Operation() == jetstream.KeyValuePut
	switch what {
	case "member":
		if put {
			g.members[rest] = true
		} else {
			delete(g.members, rest)
		}
	case "lease":
		p, err := strconv.Atoi(rest)
		if err != nil {
			return
		}
		var v leaseValue
		if put && json.Unmarshal(e.Value(), &v) == nil && v.Holder != "" {
			g.holders[p] = v.Holder
		} else {
			delete(g.holders, p)
		}
	}
}

// step renews (when renew), drops leases lost, recomputes the target and
// takes its free partitions; it signals Changed when something changed.
func (g *Group) step(ctx context.Context, renew bool) {
	g.op.Lock()
	defer g.op.Unlock()
	if g.leftGroup() {
		return
	}
	before, excessBefore := g.heldSet(), g.Excess()
	if renew {
		g.renewMember(ctx)
		g.renewLeases(ctx)
	}
	g.dropExpired()
	g.mu.Lock()
	members := append(slices.Collect(maps.Keys(g.members)), g.cfg.ID)
	holders := maps.Clone(g.holders)
	for p, h := range holders {
		if h == g.cfg.ID && g.held[p] == nil {
			delete(holders, p) // the view lags a release or a loss
		}
	}
	for p := range g.held {
		holders[p] = g.cfg.ID
	}
	g.target = Assign(g.cfg.Partitions, members, holders)
	var free []int
	for _, p := range Of(g.target, g.cfg.ID) {
		if _, taken := holders[p]; !taken {
			free = append(free, p)
		}
	}
	g.mu.Unlock()
	for _, p := range free {
		g.acquire(ctx, p)
	}
	if !slices.Equal(before, g.heldSet()) || !slices.Equal(excessBefore, g.Excess()) {
		g.signal()
	}
}

func (g *Group) signal() {
	select {
	case g.changed <- struct{}{}:
	default:
	}
}

func (g *Group) leftGroup() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.left
}

// heldSet returns the held partitions, ascending.
func (g *Group) heldSet() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := slices.Collect(maps.Keys(g.held))
	slices.Sort(out)
	return out
}

// write publishes value under key with the TTL, expecting the key's last
// revision to be rev (nil: no expectation); it returns the new revision.
func (g *Group) write(ctx context.Context, key string, value []byte, rev *uint64) (uint64, error) {
	opts := []jetstream.PublishOpt{jetstream.WithMsgTTL(g.ttl)}
	if rev != nil {
		opts = append(opts, jetstream.WithExpectLastSequencePerSubject(*rev))
	}
	ctx, cancel := context.WithTimeout(ctx, g.period)
	defer cancel()
	ack, err := g.js.PublishMsg(ctx, &nats.Msg{Subject: subject(g.cfg.Bucket, key), Data: value}, opts...)
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

func (g *Group) renewMember(ctx context.Context) {
	v := mustJSON(memberValue{Since: g.since, Info: g.cfg.Info})
	if _, err := g.write(ctx, MemberKey(g.cfg.Kind, g.cfg.ID), v, nil); err != nil && ctx.Err() == nil {
		g.cfg.Logger.Warn("lease: renew membership", "err", err)
	}
}

func (g *Group) renewLeases(ctx context.Context) {
	g.mu.Lock()
	held := maps.Clone(g.held)
	g.mu.Unlock()
	for p, h := range held {
		sent := time.Now()
		rev := h.rev
		v := mustJSON(leaseValue{Holder: g.cfg.ID, Epoch: h.epoch, Acquired: h.acquired})
		next, err := g.write(ctx, LeaseKey(g.cfg.Kind, p), v, &rev)
		if err != nil && conflict(err) {
			// A renewal stored without its ack reaching us moved the
			// key on: still ours, renew from its revision.
			if cur, ok := g.stillOurs(ctx, p, h.epoch); ok {
				rev = cur
				next, err = g.write(ctx, LeaseKey(g.cfg.Kind, p), v, &rev)
			}
		}
		g.mu.Lock()
		switch {
		case err == nil:
			h.rev, h.until = next, sent.Add(g.ttl-g.period)
		case conflict(err):
			delete(g.held, p)
			g.cfg.Logger.Warn("lease: lost partition (another write since ours)", "partition", p, "epoch", h.epoch)
		case ctx.Err() == nil:
			g.cfg.Logger.Warn("lease: renew", "partition", p, "err", err)
		}
		g.mu.Unlock()
	}
}

// dropExpired forgets leases past their until.
func (g *Group) dropExpired() {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	for p, h := range g.held {
		if !now.Before(h.until) {
			delete(g.held, p)
			g.cfg.Logger.Warn("lease: lost partition (not renewed in time)", "partition", p, "epoch", h.epoch)
		}
	}
}

// acquire tries to take partition p's lease.
func (g *Group) acquire(ctx context.Context, p int) {
	now := time.Now()
	v := mustJSON(leaseValue{Holder: g.cfg.ID, Acquired: now})
	ctx, cancel := context.WithTimeout(ctx, g.period)
	defer cancel()
	rev, err := g.kv.Create(ctx, LeaseKey(g.cfg.Kind, p), v, jetstream.KeyTTL(g.ttl))
	if err != nil {
		if !conflict(err) && ctx.Err() == nil {
			g.cfg.Logger.Warn("lease: acquire", "partition", p, "err", err)
		}
		return
	}
	g.mu.Lock()
	g.held[p] = &holding{epoch: rev, rev: rev, acquired: now, until: now.Add(g.ttl - g.period)}
	g.holders[p] = g.cfg.ID
	g.mu.Unlock()
	g.cfg.Logger.Info("lease: acquired partition", "partition", p, "epoch", rev)
}

// stillOurs reads partition p's lease and returns its revision when it is
// still this member's lease of epoch (a write of ours whose ack was lost
// moved it on; any other owner's lease has another epoch).
func (g *Group) stillOurs(ctx context.Context, p int, epoch uint64) (uint64, bool) {
	ctx, cancel := context.WithTimeout(ctx, g.period)
	defer cancel()
	e, err := g.kv.Get(ctx, LeaseKey(g.cfg.Kind, p))
	if err != nil {
		return 0, false
	}
	var v leaseValue
	if json.Unmarshal(e.Value(), &v) != nil || v.Holder != g.cfg.ID {
		return 0, false
	}
	if v.Epoch == 0 {
		v.Epoch = e.Revision() // the acquiring write itself
	}
	return e.Revision(), v.Epoch == epoch
}

// Release gives up the leases of partitions ps this member holds (others
// are ignored): the caller has stopped processing them. Others can take
// them at once. Safe to call concurrently with Run.
func (g *Group) Release(ctx context.Context, ps ...int) error {
	g.op.Lock()
	defer g.op.Unlock()
	return g.release(ctx, ps)
}

func (g *Group) release(ctx context.Context, ps []int) error {
	var errs []error
	for _, p := range ps {
		g.mu.Lock()
		h := g.held[p]
		delete(g.held, p)
		g.mu.Unlock()
		if h == nil {
			continue
		}
		err := g.kv.Purge(ctx, LeaseKey(g.cfg.Kind, p), jetstream.LastRevision(h.rev), jetstream.PurgeTTL(wire.LeaseMarkerTTL))
		if err != nil && conflict(err) {
			// A renewal stored without its ack: release from its
			// revision (another holder's key is not ours to purge).
			if cur, ok := g.stillOurs(ctx, p, h.epoch); ok {
				err = g.kv.Purge(ctx, LeaseKey(g.cfg.Kind, p), jetstream.LastRevision(cur), jetstream.PurgeTTL(wire.LeaseMarkerTTL))
			}
		}
		if err != nil && !conflict(err) {
			errs = append(errs, fmt.Errorf("lease: release partition %d: %w", p, err))
			continue
		}
		g.cfg.Logger.Info("lease: released partition", "partition", p, "epoch", h.epoch)
	}
	g.signal()
	return errors.Join(errs...)
}

// Leave releases every lease and the membership; Run does nothing more
// afterwards. Safe to call twice.
func (g *Group) Leave(ctx context.Context) error {
	g.op.Lock()
	defer g.op.Unlock()
	err := g.release(ctx, g.heldSet())
	g.mu.Lock()
	g.left = true
	g.mu.Unlock()
	if perr := g.kv.Purge(ctx, MemberKey(g.cfg.Kind, g.cfg.ID), jetstream.PurgeTTL(wire.LeaseMarkerTTL)); perr != nil {
		err = errors.Join(err, fmt.Errorf("lease: leave: %w", perr))
	}
	return err
}
