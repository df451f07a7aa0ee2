package ingest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// BenchmarkMechanism stores the same 20,000 RAW messages (built by ingest,
// heartbeats left out; the generator's retries are dropped as duplicates) into a fresh RAW per iteration three ways, and
// reports the process's CPU per message (client and in-process server):
//
//   - atomic: ingest's committer, atomic batches of 1000, one in flight
//     (ordered; a batch is stored whole or not at all);
//   - fast: one nats-server 2.15 fast batch with gap mode "fail", flow
//     controlled by the server's acks (ordered: what is stored is a prefix;
//     a message is stored as it arrives, no staging);
//   - async: plain asynchronous publishes, 4096 in flight (B0: no order
//     across a failure).
//
// Run: go test -run '^$' -bench Mechanism ./ingest/
func BenchmarkMechanism(b *testing.B) {
	const n = 20000
	data := fixture(b, n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	_, url := testenv.NATS(b)
	nc, js := dial(b, url, 0)
	in := newTestIngester(b, js, nil)
	var items []item
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 1<<20), 1<<20)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) > 0 {
			it, _, _ := in.build(bytes.Clone(sc.Bytes()))
			items = append(items, it)
		}
	}
	in.Close(ctx)
	distinct := map[string]bool{}
	for _, it := range items {
		distinct[it.id] = true
	}
	fresh := func() {
		if err := js.DeleteStream(ctx, wire.Raw); err != nil && err != jetstream.ErrStreamNotFound {
			b.Fatal(err)
		}
		ensure(b, ctx, js)
		st, err := js.Stream(ctx, wire.Raw)
		if err != nil {
			b.Fatal(err)
		}
		cfg := st.CachedInfo().Config
		cfg.AllowBatchPublish = true
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			b.Fatal(err)
		}
	}
	check := func() {
		st, err := js.Stream(ctx, wire.Raw)
		if err != nil {
			b.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if info.State.Msgs != uint64(len(distinct)) {
			b.Fatalf("stored %d messages, want the %d distinct ids", info.State.Msgs, len(distinct))
		}
	}
	run := func(b *testing.B, store func()) {
		var cpu time.Duration
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			fresh()
			cpu0 := processCPU(b)
			b.StartTimer()
			store()
			b.StopTimer()
			cpu += processCPU(b) - cpu0
			check()
			b.StartTimer()
		}
		b.ReportMetric(float64(len(items)*b.N)/b.Elapsed().Seconds(), "msgs/s")
		b.ReportMetric(float64(cpu.Microseconds())/float64(len(items)*b.N), "cpu-µs/msg")
	}
	b.Run("atomic", func(b *testing.B) {
		run(b, func() {
			c := newCommitter(js, 1000, 30*time.Second, false)
			for k := 0; k < len(items); k += 1000 {
				if _, err := commit(ctx, c, items[k:min(k+1000, len(items))]); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("fast", func(b *testing.B) {
		run(b, func() {
			if err := fastBatch(ctx, nc, items); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("async", func(b *testing.B) {
		run(b, func() {
			fs := make([]jetstream.PubAckFuture, 0, len(items))
			for _, it := range items {
				f, err := js.PublishMsgAsync(it.msg)
				if err != nil {
					b.Fatal(err)
				}
				fs = append(fs, f)
			}
			for _, f := range fs {
				select {
				case <-f.Ok():
				case err := <-f.Err():
					b.Fatal(err)
				}
			}
		})
	})
}

// fastBatch publishes items as one fast batch in gap mode "fail" and waits
// for its PubAck: a minimal client of the protocol (nats-server
// jetstream_batching.go), for BenchmarkMechanism only. At most 2 flow
// windows are sent ahead of the server's last flow ack.
func fastBatch(ctx context.Context, nc *nats.Conn, items []item) error {
	inbox := nc.NewRespInbox()
	replies := make(chan *nats.Msg, 1024)
	sub, err := nc.ChanSubscribe(inbox+".>", replies)
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	id := nats.NewInbox()[len(nats.InboxPrefix):]
	const flow = 500
	acked, window := uint64(0), uint64(flow)
	var done bool
	handle := func(m *nats.Msg) error {
		var r struct {
			Type   string          `json:"type"`
			Seq    uint64          `json:"seq"`
			Msgs   uint64          `json:"msgs"`
			Stream string          `json:"stream"`
			Count  uint64          `json:"count"`
			Error  json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(m.Data, &r); err != nil {
			return err
		}
		switch {
		case r.Type == "ack":
			acked, window = max(acked, r.Seq), max(r.Msgs, 1)
		case r.Stream != "" && r.Error == nil:
			if r.Count != uint64(len(items)) {
				return fmt.Errorf("fast batch: committed %d of %d", r.Count, len(items))
			}
			done = true
		default:
			return fmt.Errorf("fast batch: %s", m.Data)
		}
		return nil
	}
	for k, it := range items {
		seq := uint64(k + 1)
		op := 1
		switch {
		case k == len(items)-1:
			op = 2
		case k == 0:
			op = 0
		}
		for seq > acked+2*window {
			select {
			case m := <-replies:
				if err := handle(m); err != nil {
					return err
				}
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		reply := fmt.Sprintf("%s.%s.%d.fail.%d.%d.$FI", inbox, id, flow, seq, op)
		if err := nc.PublishMsg(&nats.Msg{Subject: it.msg.Subject, Reply: reply, Header: it.msg.Header, Data: it.msg.Data}); err != nil {
			return err
		}
	}
	for !done {
		select {
		case m := <-replies:
			if err := handle(m); err != nil {
				return err
			}
		case <-time.After(10 * time.Second):
			return fmt.Errorf("fast batch: no PubAck (flow acked %d)", acked)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
