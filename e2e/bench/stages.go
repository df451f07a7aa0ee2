package bench

import (
	"context"
	"encoding/json"
	"slices"
	"sort"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// stage is one hop of the way from ingest to a dashboard, with the
// latency every counted event spent in it (sorted, ms).
type stage struct {
	Name string
	Ms   []float64
}

// stageNames are the hops, in order. The times come from the server's
// timestamps of the RAW, VALID and CHANGES messages and of the KV entry, and
// from the bench's clock at publish and at the KV update (one host, one
// clock).
var stageNames = []string{
	"ingest→RAW",    // ingest's validation and the RAW store
	"RAW→VALID",     // validator
	"VALID→CHANGES", // windower (apply script) and its change notice
	"CHANGES→KV",    // publisher
	"KV→watcher",    // KV watch delivery to a dashboard
}

// stages splits every counted event's latency by hop, reading the RAW,
// VALID and CHANGES streams after the run.
func (b *bencher) stages(ctx context.Context, js jetstream.JetStream, names wire.Names, spec e2eSpec, n int,
	pubNs []atomic.Int64, rawSeq []uint64, seenNs, kvNs []int64) ([]stage, error) {
	P := b.o.Partitions
	rawTs := map[uint64]int64{}
	if err := stream.ReadAll(ctx, js, names.Stream(wire.Raw), func(m jetstream.Msg) error {
		md, err := m.Metadata()
		if err != nil {
			return err
		}
		rawTs[md.Sequence.Stream] = md.Timestamp.UnixNano()
		return nil
	}); err != nil {
		return nil, err
	}
	type valid struct {
		seq uint64
		ts  int64
	}
	byRaw := map[uint64]valid{}
	if err := stream.ReadValid(ctx, js, names.Stream(wire.Valid), func(v stream.ValidRecord) error {
		byRaw[v.RawSeq] = valid{v.Seq, v.Stored.UnixNano()}
		return nil
	}); err != nil {
		return nil, err
	}
	// Per partition, the change notices in order: (VALID seq reached, time).
	type notice struct {
		seq uint64
		ts  int64
	}
	changes := make([][]notice, P)
	if err := stream.ReadAll(ctx, js, names.Stream(wire.Changes), func(m jetstream.Msg) error {
		var c struct {
			Partition int    `json:"partition"`
			Seq       uint64 `json:"seq"`
		}
		md, err := m.Metadata()
		if err != nil || json.Unmarshal(m.Data(), &c) != nil || c.Partition < 0 || c.Partition >= P {
			return err
		}
		changes[c.Partition] = append(changes[c.Partition], notice{c.Seq, md.Timestamp.UnixNano()})
		return nil
	}); err != nil {
		return nil, err
	}
	out := make([]stage, len(stageNames))
	for i := range out {
		out[i].Name = stageNames[i]
	}
	for i := 0; i < n && i < len(rawSeq); i++ {
		if spec.ds.win[i] < 0 || seenNs[i] == 0 {
			continue
		}
		rt, ok := rawTs[rawSeq[i]]
		v, ok2 := byRaw[rawSeq[i]]
		if !ok || !ok2 {
			continue
		}
		cs := changes[spec.ds.part[i]]
		k := sort.Search(len(cs), func(j int) bool { return cs[j].seq >= v.seq })
		if k == len(cs) {
			continue
		}
		t := []int64{pubNs[i].Load(), rt, v.ts, cs[k].ts, kvNs[i], seenNs[i]}
		for s := range out {
			out[s].Ms = append(out[s].Ms, float64(t[s+1]-t[s])/1e6)
		}
	}
	for i := range out {
		slices.Sort(out[i].Ms)
	}
	return out, nil
}

// quantile of sorted values.
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*q+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
