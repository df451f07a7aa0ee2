package windower

import (
	"context"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/ledger"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// frame publishes a validator-shaped frame of RAW partition 0 to VALID
// partition 0: submissions id-<from>..id-<to> at RAW sequences from..to.
func (f *fixture) frame(from, to int, at time.Time) {
	f.t.Helper()
	fr := wire.Frame{}
	for i := from; i <= to; i++ {
		fr.Records = append(fr.Records, wire.FrameRecord{Kind: wire.FrameSubmission, RawSeq: uint64(i),
			Time: at.UnixMilli(), EventID: "id-" + strconv.Itoa(i), Type: "submitted", Fingerprint: uint64(i)})
	}
	m := stream.NewMsg(f.names.Subject(wire.Valid, 0), wire.FrameMsgID(0, uint64(from), uint64(to)), wire.AppendFrame(nil, &fr))
	m.Header.Set(wire.HdrFrame, strconv.Itoa(wire.FrameVersion))
	m.Header.Set(wire.HdrRawSeq, strconv.Itoa(to))
	if _, err := f.js.PublishMsg(f.ctx, m); err != nil {
		f.t.Fatal(err)
	}
}

// TestFramesAppliedInBoundedCallsAndRepublishedOnesChangeNothing: frames
// of 1,500 records (batches of three are split into script calls of whole
// frames), one frame of 5,000 (above the per-call bound: taken whole), and
// a frame the validator republished with other bounds after a crash (RAW
// 1,001..2,500 again, plus 100 new): every id is counted once, the trace
// names every record with its RAW sequence, and the republished ones are
// Replayed.
func TestFramesAppliedInBoundedCallsAndRepublishedOnesChangeNothing(t *testing.T) {
	f := newFixture(t)
	at := time.Now().Add(-10 * time.Minute).Truncate(time.Millisecond)
	f.frame(1, 1500, at)
	f.frame(1501, 3000, at)
	f.frame(3001, 4500, at)
	f.frame(4501, 9500, at)
	f.frame(1001, 2500, at) // republished, other bounds
	f.frame(9501, 9600, at) // new
	const want = 9600

	var mu sync.Mutex
	trace := map[string][]Trace{}
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	w := New(f.js, f.store, Config{Names: f.names, Partitions: 1, Batch: 10, Linger: 200 * time.Millisecond,
		Trace: func(p int, recs []Trace) {
			mu.Lock()
			defer mu.Unlock()
			for _, r := range recs {
				trace[r.EventID] = append(trace[r.EventID], r)
			}
		}})
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	testenv.CheckFor(t, 60*time.Second, 50*time.Millisecond, func() error {
		ck, err := f.store.Checkpoint(f.ctx, 0)
		if err != nil {
			return err
		}
		if ck.Seq < 6 || ck.Published < 6 {
			return errNotYet(ck)
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ids, err := f.store.Windows(f.ctx, 0)
	if err != nil || len(ids) != 1 {
		t.Fatalf("windows %v %v, want one", ids, err)
	}
	view, err := f.store.Read(f.ctx, 0, ids)
	if err != nil {
		t.Fatal(err)
	}
	if n := view.Partials[ids[0]].Count; n != want {
		t.Fatalf("count %d, want %d", n, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(trace) != want {
		t.Fatalf("trace names %d ids, want %d", len(trace), want)
	}
	for i := 1; i <= want; i++ {
		id := "id-" + strconv.Itoa(i)
		tr := trace[id]
		if len(tr) == 0 || tr[0].RawSeq != uint64(i) || tr[0].Decision.Code != ledger.Counted {
			t.Fatalf("%s traced %+v, want counted at RAW %d", id, tr, i)
		}
		republished := i > 1000 && i <= 2500
		if republished && (len(tr) != 2 || tr[1].Decision.Code != ledger.Replayed || tr[1].ValidSeq != 5) {
			t.Fatalf("%s traced %+v, want counted, then replayed from VALID seq 5", id, tr)
		}
		if !republished && len(tr) != 1 {
			t.Fatalf("%s traced %d times", id, len(tr))
		}
	}
}

type notYet struct{ ck ledger.Checkpoint }

func (n notYet) Error() string {
	return "checkpoint " + strconv.FormatUint(n.ck.Seq, 10) + " published " + strconv.FormatUint(n.ck.Published, 10)
}

func errNotYet(ck ledger.Checkpoint) error { return notYet{ck} }

// TestApplyLenKeepsFramesWhole: script calls take whole messages, at most
// the bound, a message above the bound alone.
func TestApplyLenKeepsFramesWhole(t *testing.T) {
	var recs []ledger.Record
	for seq, n := range []int{1500, 1500, 1500, 5000, 1500, 100} {
		for range n {
			recs = append(recs, ledger.Record{Seq: uint64(seq + 1)})
		}
	}
	var got []int
	for len(recs) > 0 {
		n := applyLen(recs, maxApplyRecords)
		got = append(got, n)
		recs = recs[n:]
	}
	if want := []int{3000, 1500, 5000, 1600}; !reflect.DeepEqual(got, want) {
		t.Fatalf("calls of %v records, want %v", got, want)
	}
}
