package dashboard

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/lease"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// TestOwnersOfEachPartition (issue 27): /api/health and the page's view
// say the deployment runs on static indices while the generation's lease
// bucket was never written; once two windowers hold leases, they list
// every partition with its owner, its address and the lease's epoch, and
// the validator's kind, without a member, is said to have none.
func TestOwnersOfEachPartition(t *testing.T) {
	_, url := testenv.NATS(t)
	f := start(t, url, Config{OwnersEvery: 100 * time.Millisecond})
	kv := f.bucket("1")
	now := time.Now().UTC()
	f.put(kv, wire.HealthKey, wire.Health{UpdatedAt: now, SourceLastSeen: now, StaleAfter: "2m0s", Grace: "1h0m0s",
		GlobalWatermark: now, Watermarks: []time.Time{now, now, now, now}})

	owners := func() OwnersView {
		var h HealthView
		f.getJSON("/api/health", &h)
		return h.Owners
	}
	testenv.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		o := owners()
		if o.Status != OwnersOK || len(o.Kinds) != 2 || o.Kinds[0].Mode != ModeStatic || o.Kinds[1].Mode != ModeStatic {
			return fmt.Errorf("before any lease: %+v, want both kinds static", o)
		}
		return nil
	})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	members := map[string]string{"wa": "127.0.0.1:9001", "wb": "127.0.0.1:9002"}
	for id, addr := range members {
		g, err := lease.Join(ctx, f.js, lease.Config{Bucket: wire.For("1").LeaseBucket(), Kind: "windower", ID: id,
			Partitions: 4, TTL: 5 * time.Second, Info: addr})
		if err != nil {
			t.Fatal(err)
		}
		go g.Run(ctx)
		go func() { // a service with nothing to drain
			for range g.Changed() {
				if ex := g.Excess(); len(ex) > 0 {
					_ = g.Release(ctx, ex...)
				}
			}
		}()
	}
	var got OwnersView
	testenv.CheckFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		got = owners()
		if got.Status != OwnersOK || len(got.Kinds) != 2 {
			return fmt.Errorf("owners %+v", got)
		}
		v, w := got.Kinds[0], got.Kinds[1]
		if v.Kind != "validator" || v.Mode != ModeNoMember || len(v.Partitions) != 0 {
			return fmt.Errorf("validator %+v, want no member (the bucket was written)", v)
		}
		if w.Kind != "windower" || w.Mode != ModeGroup || w.Members != 2 || len(w.Partitions) != 4 {
			return fmt.Errorf("windower %+v, want a group of 2 over 4 partitions", w)
		}
		per := map[string]int{}
		for _, p := range w.Partitions {
			if p.Member == "" {
				return fmt.Errorf("partition %d held by nobody yet", p.Partition)
			}
			if p.Address != members[p.Member] || p.Epoch == 0 || p.Acquired.IsZero() {
				return fmt.Errorf("partition %+v: address, epoch or acquired time missing", p)
			}
			per[p.Member]++
		}
		if per["wa"] != 2 || per["wb"] != 2 {
			return fmt.Errorf("shares %v, want 2 each", per)
		}
		return nil
	})
	t.Logf("owners: %+v", got.Kinds[1].Partitions)
	// The page's view carries the same.
	if v := f.windows(); v.Owners.Status != OwnersOK || len(v.Owners.Kinds) != 2 || v.Owners.Kinds[1].Members != 2 {
		t.Errorf("/api/windows owners %+v", v.Owners)
	}
}

// TestOwnersOf: every partition of a group is listed, those nobody holds
// without a member; a kind without members is static while the bucket was
// never written, and without a member after.
func TestOwnersOf(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	v := lease.View{
		Members: []lease.Member{{Kind: "windower", ID: "a", Info: "h:1"}},
		Leases: []lease.Lease{
			{Kind: "windower", Partition: 0, Holder: "a", Epoch: 7, Acquired: t0},
			{Kind: "windower", Partition: 2, Holder: "a", Epoch: 9, Acquired: t0},
		},
	}
	for _, tc := range []struct {
		name       string
		partitions int
		written    bool
		validator  string
		free       []int
		listed     int
	}{
		{"known partition count", 4, true, ModeNoMember, []int{1, 3}, 4},
		{"unknown partition count", 0, true, ModeNoMember, []int{1}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ks := ownersOf(v, tc.partitions, tc.written)
			if ks[0].Mode != tc.validator || ks[1].Mode != ModeGroup || len(ks[1].Partitions) != tc.listed {
				t.Fatalf("%+v", ks)
			}
			var free []int
			for _, p := range ks[1].Partitions {
				if p.Member == "" {
					free = append(free, p.Partition)
				} else if p.Address != "h:1" {
					t.Errorf("partition %d: address %q", p.Partition, p.Address)
				}
			}
			if fmt.Sprint(free) != fmt.Sprint(tc.free) {
				t.Errorf("nobody holds %v, want %v", free, tc.free)
			}
		})
	}
	if ks := ownersOf(lease.View{}, 4, false); ks[0].Mode != ModeStatic || ks[1].Mode != ModeStatic || ks[1].Partitions != nil {
		t.Errorf("a never written bucket: %+v, want static", ks)
	}
	if ks := ownersOf(lease.View{}, 4, true); ks[1].Mode != ModeNoMember {
		t.Errorf("a written bucket without members: %+v, want no_member", ks)
	}
}

// TestOwnersPollAsksLittle: a poll of a lease bucket with nothing in it
// is one status request (no watch), a poll of a held one a status and
// one watch, through a handle kept from one poll to the next; a bucket
// deleted and made again under the kept handle is read again at once.
func TestOwnersPollAsksLittle(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, url := testenv.NATS(t)
	js := testenv.JetStream(t, url)
	bucket := wire.For("1").LeaseBucket()
	kvCfg := jetstream.KeyValueConfig{Bucket: bucket, History: 1, LimitMarkerTTL: wire.LeaseMarkerTTL}
	if _, err := js.CreateKeyValue(ctx, kvCfg); err != nil {
		t.Fatal(err)
	}
	counts := testenv.CountRequests(t, js.Conn(), "$JS.API.STREAM.INFO.KV_"+bucket, "$JS.API.CONSUMER.CREATE.KV_"+bucket+".>")
	p := newOwnersPoller(js, time.Second, time.Now, func() (string, int) { return "1", 4 })
	polls := func(what string, n int, wantInfos, wantWatches int64, mode string) {
		t.Helper()
		counts.Take(t)
		for range n {
			p.poll(ctx)
		}
		got := counts.Take(t)
		v := p.snapshot()
		if v.Status != OwnersOK || len(v.Kinds) == 0 || v.Kinds[len(v.Kinds)-1].Mode != mode {
			t.Fatalf("%s: owners %+v, want the windower %s", what, v, mode)
		}
		if gi, gw := int64(got[0]), int64(got[1]); gi > wantInfos || gw != wantWatches {
			t.Fatalf("%s: %d polls asked for %d stream infos and %d watches, want at most %d and %d",
				what, n, gi, gw, wantInfos, wantWatches)
		}
	}
	polls("first poll, empty bucket", 1, 2, 0, ModeStatic) // the look-up and the status
	polls("empty bucket", 5, 5, 0, ModeStatic)

	g, err := lease.Join(ctx, js, lease.Config{Bucket: bucket, Kind: "windower", ID: "wa", Partitions: 4, TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	gctx, stop := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		_ = g.Run(gctx)
	}()
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		p.poll(ctx)
		if v := p.snapshot(); len(v.Kinds) == 0 || v.Kinds[len(v.Kinds)-1].Mode != ModeGroup {
			return fmt.Errorf("owners %+v, want the windower in a group", v)
		}
		return nil
	})
	polls("held bucket", 5, 5, 5, ModeGroup)
	stop()
	<-ran // nothing of the group writes to the bucket while it is deleted

	if err := js.DeleteKeyValue(ctx, bucket); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateKeyValue(ctx, kvCfg); err != nil {
		t.Fatal(err)
	}
	polls("bucket made again", 1, 2, 0, ModeStatic)
}
