package ledger

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// The breakdown changes in the same step as the count, and only with it:
// on time and corrections add to their store; duplicates, late events,
// other types, replays of the same records and a frame published again
// with other bounds add nothing.
func TestApplyBreakdownCountsOnceWithTheCount(t *testing.T) {
	backends(t, func(t *testing.T, rdb *redis.Client) {
		ctx := context.Background()
		s := NewStore(rdb, Config{Keys: Keys{Prefix: "rf:1:"}, Lateness: 5 * time.Minute, Grace: time.Hour})
		sub := func(seq, raw uint64, id string, at int64, store string, amount int64, priced bool) Record {
			return Record{Seq: seq, RawSeq: raw, Kind: Submission, EventID: id, Time: at, Store: store, AmountCents: amount, Priced: priced}
		}
		first := []Record{
			sub(1, 1, "a", h10+1*minute, "store-a", 1299, true),
			sub(1, 2, "b", h10+2*minute, "store-a", 450, true),
			sub(1, 3, "c", h10+3*minute, "store-b", 0, false),
			{Seq: 1, RawSeq: 4, Kind: Other, EventID: "v", Time: h10 + 4*minute},
			sub(1, 5, "a", h10+5*minute, "store-a", 1299, true), // a duplicate
		}
		if _, err := s.Apply(ctx, 0, first, 0, 0); err != nil {
			t.Fatal(err)
		}
		// The same frame again, and its records in a frame cut at other
		// bounds (new VALID sequence, same RAW sequences): replays.
		if _, err := s.Apply(ctx, 0, first, 1, 0); err != nil {
			t.Fatal(err)
		}
		again := append([]Record(nil), first[1:]...)
		for i := range again {
			again[i].Seq = 2
		}
		if _, err := s.Apply(ctx, 0, again, 1, 0); err != nil {
			t.Fatal(err)
		}
		// The watermark passes the end of 10:00: a correction counts (and
		// adds), then past the grace a late event does not.
		second := []Record{
			sub(3, 6, "w", h10+70*minute, "store-c", 5, true),
			sub(3, 7, "d", h10+30*minute, "store-b", -200, true), // correction
			sub(3, 8, "x", h10+200*minute, "store-c", 7, true),
			sub(3, 9, "e", h10+40*minute, "store-a", 999, true), // too late
		}
		res, err := s.Apply(ctx, 0, second, 2, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := codes(res); !reflect.DeepEqual(got, []Code{Counted, Correction, Counted, Late}) {
			t.Fatalf("decisions %v", got)
		}
		id := window.ID(h10)
		v, err := s.Read(ctx, 0, []string{id})
		if err != nil {
			t.Fatal(err)
		}
		p := v.Partials[id]
		want := map[string]wire.StoreTotal{
			"store-a": {Store: "store-a", Count: 2, AmountCents: 1749},
			"store-b": {Store: "store-b", Count: 2, AmountCents: -200, Unpriced: 1},
		}
		if p.Count != 4 || !reflect.DeepEqual(p.Stores, want) {
			t.Fatalf("partial count %d, stores %+v; want 4, %+v", p.Count, p.Stores, want)
		}
		var sum int64
		for _, st := range p.Stores {
			sum += st.Count
		}
		if sum != p.Count {
			t.Fatalf("breakdown sums to %d, count is %d", sum, p.Count)
		}
	})
}

func TestNewBreakdownTopStoresAndRest(t *testing.T) {
	by := map[string]wire.StoreTotal{}
	for i := 0; i < wire.TopStores+3; i++ {
		wire.AddStore(by, wire.StoreTotal{Store: string(rune('A'+i%26)) + string(rune('a'+i/26)), Count: int64(i + 1), AmountCents: 10})
	}
	wire.AddStore(by, wire.StoreTotal{Store: "Aa", Count: 1, Unpriced: 1})
	b := wire.NewBreakdown(by)
	if b.StoreCount != wire.TopStores+3 || len(b.ByStore) != wire.TopStores {
		t.Fatalf("store count %d, listed %d", b.StoreCount, len(b.ByStore))
	}
	if b.ByStore[0].Count != int64(wire.TopStores+3) {
		t.Fatalf("first listed %+v, want the busiest", b.ByStore[0])
	}
	for i := 1; i < len(b.ByStore); i++ {
		if b.ByStore[i].Count > b.ByStore[i-1].Count {
			t.Fatalf("not by count: %+v after %+v", b.ByStore[i], b.ByStore[i-1])
		}
	}
	// The three smallest (counts 1+1 (Aa twice), 2, 3) are the rest.
	if b.OtherStores.Count != 2+2+3 || b.OtherStores.Unpriced != 1 || b.OtherStores.AmountCents != 30 {
		t.Fatalf("other stores %+v", b.OtherStores)
	}
	if b.AmountCents != int64(10*(wire.TopStores+3)) || b.Unpriced != 1 {
		t.Fatalf("totals %d cents, %d unpriced", b.AmountCents, b.Unpriced)
	}
}
