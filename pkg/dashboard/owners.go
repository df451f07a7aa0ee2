package dashboard

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/lease"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// Owners statuses (OwnersView.Status).
const (
	// OwnersWaiting: the lease bucket has not been read yet.
	OwnersWaiting = "waiting"
	// OwnersOK: the last read answered; Kinds is what it found.
	OwnersOK = "ok"
	// OwnersUnavailable: the last read failed (Error says why); Kinds is
	// empty, since an older read may no longer hold.
	OwnersUnavailable = "unavailable"
)

// Modes of a kind's partitions (OwnerKind.Mode).
const (
	// ModeGroup: members of the kind's group hold leases; Partitions
	// lists every partition with its holder, or none.
	ModeGroup = "group"
	// ModeStatic: the generation's lease bucket was never written (or
	// does not exist): every instance runs on --instance/--instances.
	ModeStatic = "static"
	// ModeNoMember: the bucket was written, but no member of the kind is
	// live: its partitions are served by static instances, or nobody.
	ModeNoMember = "no_member"
)

// ownerKinds are the kinds that can form groups, in the order shown.
var ownerKinds = []string{"validator", "windower"}

// OwnersView is who owns each partition, read from the generation's
// lease bucket (pkg/lease; docs/architecture.md, "Groups without indices").
type OwnersView struct {
	Status string `json:"status"`
	// Bucket is the lease bucket read.
	Bucket string `json:"bucket,omitempty"`
	// Error is why the last read failed (Status OwnersUnavailable).
	Error     string    `json:"error,omitempty"`
	CheckedAt time.Time `json:"checked_at,omitzero"`
	// Kinds are the validator's and the windower's groups; never nil.
	Kinds []OwnerKind `json:"kinds"`
}

// OwnerKind is one kind's partitions and their owners.
type OwnerKind struct {
	Kind    string `json:"kind"`
	Mode    string `json:"mode"`
	Members int    `json:"members"`
	// Partitions are every partition (0..P-1 with P from the publisher's
	// report, and any held beyond), in ModeGroup only.
	Partitions []PartitionOwner `json:"partitions,omitempty"`
}

// PartitionOwner is one partition's lease; Member "" when nobody holds it.
type PartitionOwner struct {
	Partition int    `json:"partition"`
	Member    string `json:"member,omitempty"`
	// Address is what the member says of itself (its HTTP address).
	Address  string    `json:"address,omitempty"`
	Epoch    uint64    `json:"epoch,omitempty"`
	Acquired time.Time `json:"acquired,omitzero"`
	Renewed  time.Time `json:"renewed,omitzero"`
}

// ownersOf builds the view of v for a generation of partitions partitions
// (0: unknown); written reports whether the lease bucket was ever written.
func ownersOf(v lease.View, partitions int, written bool) []OwnerKind {
	out := make([]OwnerKind, 0, len(ownerKinds))
	for _, kind := range ownerKinds {
		k := OwnerKind{Kind: kind}
		info := map[string]string{}
		for _, m := range v.Members {
			if m.Kind == kind {
				k.Members++
				info[m.ID] = m.Info
			}
		}
		held := map[int]lease.Lease{}
		top := partitions
		for _, l := range v.Leases {
			if l.Kind == kind {
				held[l.Partition] = l
				top = max(top, l.Partition+1)
			}
		}
		switch {
		case k.Members > 0 || len(held) > 0:
			k.Mode = ModeGroup
			for p := range top {
				po := PartitionOwner{Partition: p}
				if l, ok := held[p]; ok {
					po.Member, po.Address, po.Epoch, po.Acquired, po.Renewed = l.Holder, info[l.Holder], l.Epoch, l.Acquired, l.Renewed
				}
				k.Partitions = append(k.Partitions, po)
			}
		case written:
			k.Mode = ModeNoMember
		default:
			k.Mode = ModeStatic
		}
		out = append(out, k)
	}
	return out
}

// ownersPoller reads the lease bucket of the generation shown. Safe for
// concurrent use.
type ownersPoller struct {
	js    jetstream.JetStream
	every time.Duration
	now   func() time.Time
	// target returns the generation shown ("" before the first load) and
	// its partition count (0: unknown).
	target func() (string, int)

	// kv is the lease bucket last read (nil: look it up), used by the
	// polling goroutine only.
	kv jetstream.KeyValue

	mu   sync.Mutex
	view OwnersView
}

func newOwnersPoller(js jetstream.JetStream, every time.Duration, now func() time.Time, target func() (string, int)) *ownersPoller {
	return &ownersPoller{js: js, every: every, now: now, target: target,
		view: OwnersView{Status: OwnersWaiting, Kinds: []OwnerKind{}}}
}

// snapshot returns the current view.
func (p *ownersPoller) snapshot() OwnersView {
	p.mu.Lock()
	defer p.mu.Unlock()
	v := p.view
	v.Kinds = slices.Clone(p.view.Kinds)
	return v
}

// run reads at once and then every p.every until ctx ends, calling
// changed after each read whose result differs from the one before.
func (p *ownersPoller) run(ctx context.Context, changed func()) {
	repeatPoll(ctx, p.every, p.poll, changed)
}

// poll reads the bucket once (bounded by p.every, at least 2s) and
// records the answer; it reports whether the view changed.
func (p *ownersPoller) poll(ctx context.Context) bool {
	gen, partitions := p.target()
	if gen == "" {
		return false // no generation loaded yet: still waiting
	}
	bucket := wire.For(gen).LeaseBucket()
	rctx, cancel := context.WithTimeout(ctx, max(p.every, 2*time.Second))
	kinds, err := p.read(rctx, bucket, partitions)
	cancel()
	if ctx.Err() != nil {
		return false // shutting down: keep the last verdict
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	before := p.view
	p.view = OwnersView{Status: OwnersOK, Bucket: bucket, CheckedAt: p.now().UTC(), Kinds: kinds}
	if err != nil {
		p.view.Status, p.view.Error, p.view.Kinds = OwnersUnavailable, err.Error(), []OwnerKind{}
	}
	return before.Status != p.view.Status || before.Error != p.view.Error || before.Bucket != p.view.Bucket ||
		!slices.EqualFunc(before.Kinds, p.view.Kinds, sameKind)
}

// read returns the owners in bucket: static when it does not exist or
// was never written. The bucket's handle is kept from one poll to the
// next, and its entries are read only when its status says it holds
// some; a read through the kept handle that fails looks the bucket up
// again once (it may have been deleted or made again).
func (p *ownersPoller) read(ctx context.Context, bucket string, partitions int) ([]OwnerKind, error) {
	if p.kv != nil && p.kv.Bucket() != bucket {
		p.kv = nil
	}
	for attempt := 0; ; attempt++ {
		fresh := p.kv == nil
		if fresh {
			kv, err := p.js.KeyValue(ctx, bucket)
			if errors.Is(err, jetstream.ErrBucketNotFound) {
				return ownersOf(lease.View{}, partitions, false), nil
			}
			if err != nil {
				return nil, err
			}
			p.kv = kv
		}
		kinds, err := readOwners(ctx, p.kv, partitions)
		if err == nil {
			return kinds, nil
		}
		p.kv = nil
		if fresh || attempt > 0 || ctx.Err() != nil {
			return nil, err
		}
	}
}

// readOwners reads the owners in the lease bucket kv.
func readOwners(ctx context.Context, kv jetstream.KeyValue, partitions int) ([]OwnerKind, error) {
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, err
	}
	written, held := true, true
	if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok {
		state := bs.StreamInfo().State
		written = state.LastSeq > 0 // sequences survive expiry and purges
		held = state.Msgs > 0
	}
	var v lease.View
	if held {
		if v, err = lease.ReadKV(ctx, kv); err != nil {
			return nil, err
		}
	}
	return ownersOf(v, partitions, written), nil
}

func sameKind(a, b OwnerKind) bool {
	return a.Kind == b.Kind && a.Mode == b.Mode && a.Members == b.Members &&
		slices.EqualFunc(a.Partitions, b.Partitions, func(x, y PartitionOwner) bool {
			return x.Partition == y.Partition && x.Member == y.Member && x.Address == y.Address &&
				x.Epoch == y.Epoch && x.Acquired.Equal(y.Acquired) // renewals alone are no change
		})
}
