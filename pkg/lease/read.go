package lease

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Member is one live member of a group as the bucket shows it.
type Member struct {
	Kind, ID string
	Since    time.Time // when the member started
	Renewed  time.Time // its last renewal
	Info     string
}

// Lease is one partition's lease as the bucket shows it.
type Lease struct {
	Kind      string
	Partition int
	Holder    string
	Epoch     uint64
	Acquired  time.Time // when Holder took it
	Renewed   time.Time // its last renewal
}

// View is what a lease bucket holds now: members and leases, sorted by
// kind, then id or partition.
type View struct {
	Members []Member
	Leases  []Lease
}

// Read returns the current members and leases of every kind in bucket
// (an empty View when the bucket does not exist). Read only; safe to call
// concurrently.
func Read(ctx context.Context, js jetstream.JetStream, bucket string) (View, error) {
	kv, err := js.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return View{}, nil
	}
	if err != nil {
		return View{}, fmt.Errorf("lease: open bucket %s: %w", bucket, err)
	}
	return ReadKV(ctx, kv)
}

// ReadKV is Read of a lease bucket already opened: a reader that looks
// again and again keeps the handle and saves the stream look-up.
func ReadKV(ctx context.Context, kv jetstream.KeyValue) (View, error) {
	var v View
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return v, fmt.Errorf("lease: read %s: %w", kv.Bucket(), err)
	}
	defer w.Stop()
	for {
		var e jetstream.KeyValueEntry
		select {
		case <-ctx.Done():
			return v, ctx.Err()
		case e = <-w.Updates():
		}
		if e == nil {
			break
		}
		kind, what, rest, ok := parseKey(e.Key())
		if !ok {
			continue
		}
		switch what {
		case "member":
			var mv memberValue
			_ = json.Unmarshal(e.Value(), &mv)
			v.Members = append(v.Members, Member{Kind: kind, ID: rest, Since: mv.Since, Renewed: e.Created(), Info: mv.Info})
		case "lease":
			if l, ok := LeaseOf(e); ok {
				v.Leases = append(v.Leases, l)
			}
		}
	}
	slices.SortFunc(v.Members, func(a, b Member) int { return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.ID, b.ID)) })
	slices.SortFunc(v.Leases, func(a, b Lease) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Partition, b.Partition))
	})
	return v, nil
}

// LeaseOf decodes a lease key's entry (a put: a take or a renewal); ok is
// false for any other key, a delete or purge, or a value it cannot read.
func LeaseOf(e jetstream.KeyValueEntry) (Lease, bool) {
	kind, what, rest, ok := parseKey(e.Key())
	if !ok || what != "lease" || e.Operation() != jetstream.KeyValuePut {
		return Lease{}, false
	}
	p, err := strconv.Atoi(rest)
	var lv leaseValue
	if err != nil || json.Unmarshal(e.Value(), &lv) != nil {
		return Lease{}, false
	}
	epoch := lv.Epoch
	if epoch == 0 {
		epoch = e.Revision()
	}
	return Lease{Kind: kind, Partition: p, Holder: lv.Holder, Epoch: epoch, Acquired: lv.Acquired, Renewed: e.Created()}, true
}

// Of returns the partitions member id of kind holds in v, ascending.
func (v View) Of(kind, id string) []int {
	var out []int
	for _, l := range v.Leases {
		if l.Kind == kind && l.Holder == id {
			out = append(out, l.Partition)
		}
	}
	return out
}
