package wire

import (
	"sort"
	"time"

	"github.com/receiptflow/receiptflow/pkg/internal/digest"
	"github.com/receiptflow/receiptflow/pkg/window"
)

// Partial is one partition's share of a window, as the windower's Lua
// script keeps it in Redis.
type Partial struct {
	Partition int `json:"partition"`
	// Count is the number of distinct submissions counted.
	Count int64 `json:"count"`
	// Corrections is how many of Count were counted while the partition
	// watermark was past the window end (within grace).
	Corrections int64 `json:"corrections"`
	// LateDropped is the number of distinct event ids routed to LATE.
	LateDropped int64 `json:"late_dropped"`
	// Version is the number of changes (count or late_dropped) so far.
	Version int64 `json:"version"`
	// OnTimeVersion is the number of changes made while on time.
	OnTimeVersion int64 `json:"-"`
	// Digest is the digest of the counted event ids.
	Digest digest.Digest `json:"-"`
	// Watermark is the partition watermark read with the partial.
	Watermark int64 `json:"-"`
	// Stores is the partition's breakdown of Count by store.
	Stores map[string]StoreTotal `json:"-"`
}

// Window is the KV value of one window, under WindowKey (docs/spec.md §5).
type Window struct {
	WindowID           string        `json:"window_id"`
	Start              time.Time     `json:"start"`
	End                time.Time     `json:"end"`
	Count              int64         `json:"count"`
	Version            int64         `json:"version"`
	Status             window.Status `json:"status"`
	Watermark          time.Time     `json:"watermark"`
	UpdatedAt          time.Time     `json:"updated_at"`
	FirstOutputVersion int64         `json:"first_output_version"`
	Corrections        int64         `json:"corrections"`
	LateDropped        int64         `json:"late_dropped"`
	Stale              bool          `json:"stale"`
	// Digest is the replay-safety digest of the counted event ids.
	Digest string `json:"digest"`
	// Partitions holds the per-partition partial counts, by partition.
	Partitions []Partial `json:"partitions"`
	// Generation is the state generation the snapshot was built from.
	Generation string `json:"generation"`
	// The breakdown (docs/spec.md §5.1): Count by store, with the
	// amounts. AmountCents sums the counted submissions' amount_cents;
	// Unpriced counts those without one (contract.AmountCents).
	Breakdown
}

// UnknownStore is the store of a submission counted from a VALID message
// that did not carry one (a frame of version 1, or a message from before
// frames): a partition_key is never empty, so it is no real store's.
const UnknownStore = ""

// StoreTotal is one store's share of a window: the submissions counted,
// the sum of their amounts, and how many of them had no amount.
type StoreTotal struct {
	Store       string `json:"store"`
	Count       int64  `json:"count"`
	AmountCents int64  `json:"amount_cents"`
	Unpriced    int64  `json:"unpriced"`
}

// TopStores is how many stores a snapshot lists one by one; the rest are
// summed in Breakdown.OtherStores, so a snapshot stays small whatever the
// number of stores.
const TopStores = 50

// Breakdown is a window's count by store in the form snapshots hold it:
// the TopStores stores with the most submissions (ties by store name),
// the sum of all others, and the window's totals.
type Breakdown struct {
	AmountCents int64 `json:"amount_cents"`
	Unpriced    int64 `json:"unpriced"`
	// StoreCount is the number of stores with a counted submission.
	StoreCount int `json:"store_count"`
	// ByStore lists at most TopStores stores, most submissions first.
	ByStore []StoreTotal `json:"by_store"`
	// OtherStores sums the stores ByStore leaves out (Store is empty).
	OtherStores StoreTotal `json:"other_stores"`
}

// NewBreakdown builds the snapshot form of the per-store totals in by
// (keyed by store; entries with no count are left out). The streaming
// publisher and the batch pass build it the same way from their own
// counts, so two breakdowns are equal exactly when the counts are.
func NewBreakdown(by map[string]StoreTotal) Breakdown {
	all := make([]StoreTotal, 0, len(by))
	for store, st := range by {
		if st.Count == 0 && st.AmountCents == 0 && st.Unpriced == 0 {
			continue
		}
		st.Store = store
		all = append(all, st)
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].Count != all[j].Count {
			return all[i].Count > all[j].Count
		}
		return all[i].Store < all[j].Store
	})
	b := Breakdown{StoreCount: len(all), ByStore: []StoreTotal{}}
	for i, st := range all {
		b.AmountCents += st.AmountCents
		b.Unpriced += st.Unpriced
		if i < TopStores {
			b.ByStore = append(b.ByStore, st)
			continue
		}
		b.OtherStores.Add(st)
	}
	return b
}

// Add adds o's count, amount and unpriced submissions to t (t's Store
// stays).
func (t *StoreTotal) Add(o StoreTotal) {
	t.Count += o.Count
	t.AmountCents += o.AmountCents
	t.Unpriced += o.Unpriced
}

// AddStore adds st's totals to the entry of its store in by.
func AddStore(by map[string]StoreTotal, st StoreTotal) {
	cur := by[st.Store]
	cur.Store = st.Store
	cur.Add(st)
	by[st.Store] = cur
}
