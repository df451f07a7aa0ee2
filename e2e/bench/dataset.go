package bench

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"

	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/traffic"
	"github.com/receiptflow/receiptflow/pkg/window"
)

// dataset is one generated NDJSON file and what the bench needs to know
// about each of its records without parsing them again.
type dataset struct {
	name  string
	path  string
	stats traffic.Stats
	// bytes is the file size.
	bytes int64
	// part is each record's RAW partition (the partition of its key).
	part []uint8
	// win is each record's window index into windows, or -1 for a record
	// that is never counted (other types, duplicates, invalid, too late).
	win []int32
	// windows are the ids of the windows with counted submissions, by
	// index (first-seen order).
	windows []string
	// expected is the count every window must reach.
	expected map[string]int64
	// perPartition is how many records go to each RAW partition.
	perPartition []int
	// hot is the hot-key declaration the records were routed with.
	hot window.HotKeys
}

// mix returns the generator options of a named traffic mix.
func mix(name string, events int) traffic.Config {
	o := traffic.DefaultConfig()
	o.Events = events
	o.Stores = 256
	o.HotShare = 0
	o.DupRate = 0
	o.LateRate = 0
	o.InvalidRate = 0
	switch name {
	case "dup10":
		o.DupRate = 0.10
	case "skew50":
		o.HotShare = 0.5
	}
	return o
}

// generate writes the dataset of a mix into dir.
func generate(dir, name string, o traffic.Config, partitions int, hot window.HotKeys) (*dataset, error) {
	d := &dataset{
		name:         name,
		hot:          hot,
		path:         filepath.Join(dir, name+".ndjson"),
		part:         make([]uint8, 0, o.Events),
		win:          make([]int32, 0, o.Events),
		expected:     map[string]int64{},
		perPartition: make([]int, partitions),
	}
	f, err := os.Create(d.path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	wins := map[string]int32{}
	keyPart := map[string]uint8{}
	st, err := traffic.Each(o, func(r traffic.Record) error {
		if _, err := bw.Write(r.Line); err != nil {
			return err
		}
		if err := bw.WriteByte('\n'); err != nil {
			return err
		}
		p, ok := keyPart[r.PartitionKey]
		switch {
		case hot[r.PartitionKey] > 0:
			p = uint8(window.Route(r.PartitionKey, r.EventID, partitions, hot))
		case !ok:
			p = uint8(window.Partition(r.PartitionKey, partitions))
			keyPart[r.PartitionKey] = p
		}
		d.part = append(d.part, p)
		d.perPartition[p]++
		counted := r.Type == contract.TypeSubmitted && (r.Kind == traffic.KindNew || r.Kind == traffic.KindLateWithinGrace)
		if !counted {
			d.win = append(d.win, -1)
			return nil
		}
		id := window.ID(r.EventTime)
		w, ok := wins[id]
		if !ok {
			w = int32(len(wins))
			wins[id] = w
			d.windows = append(d.windows, id)
		}
		d.win = append(d.win, w)
		d.expected[id]++
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("bench: generate %s: %w", name, err)
	}
	if err := bw.Flush(); err != nil {
		return nil, err
	}
	d.stats = st
	d.bytes = st.Bytes
	return d, nil
}

// hotShare is the share of records that go to the busiest partition.
func (d *dataset) hotShare() float64 {
	n := 0
	for _, c := range d.perPartition {
		n = max(n, c)
	}
	return float64(n) / float64(max(1, len(d.part)))
}
