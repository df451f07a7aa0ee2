package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/config"
	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/ingest"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// b0InFlight bounds B0's unacknowledged publishes, as ingest's default
// MaxInFlight does.
const b0InFlight = 4096

// b0Result is the raw JetStream limit.
type b0Result struct {
	Records    int
	Publish    time.Duration
	Consume    time.Duration
	PublishEPS float64
	ConsumeEPS float64
	// PublishCPU and ConsumeCPU are the bench process's CPU time (the
	// embedded nats-server and the client), and that of the server
	// processes on a cluster, in each phase.
	PublishCPU, ConsumeCPU time.Duration
}

// b0SyncLimit bounds the records of the B0 run with sync_interval: always
// (one fsync per stored message: a full run would take many minutes);
// b0SyncLimitQuick in quick mode.
const (
	b0SyncLimit      = 50_000
	b0SyncLimitQuick = 5_000
)

// b0Spec selects a B0 variant.
type b0Spec struct {
	// nodes > 1 runs on a cluster of that many nats-server processes,
	// every stream with as many replicas.
	nodes int
	// syncAlways: the server fsyncs every write before its ack
	// (sync_interval: always); otherwise nats-server's default.
	syncAlways bool
	// limit > 0 publishes only the first limit records.
	limit int
	// publishOnly skips the consume phase.
	publishOnly bool
	// viaIngest publishes through pkg/ingest, as the E2E run does
	// (ordered batches and heartbeats), instead of raw async publishes;
	// implies publishOnly.
	viaIngest bool
}

// runB0 measures raw JetStream on the same server setup as the pipeline:
// the records of ds published asynchronously, Nats-Msg-Id = event_id, to
// their partition's subject of the RAW stream (same config as the
// pipeline's: file store, duplicate window), at most b0InFlight in flight;
// then one durable pull consumer over every partition fetching them all
// (the client's callback API, 1000 messages per pull) and acknowledging
// them (ack-all, one ack per 500 messages, as the services ack once per
// batch). No record is parsed, validated or stored anywhere
// else.
func (b *bencher) runB0(ctx context.Context, ds *dataset, spec b0Spec) (b0Result, error) {
	res := b0Result{}
	dir := filepath.Join(b.work, "nats-b0")
	target, err := b.startTarget(ctx, dir, spec.syncAlways, spec.nodes)
	if err != nil {
		return res, err
	}
	defer target.stop()
	conn, err := connect.ConnectNATS(target.url, "bench-b0")
	if err != nil {
		return res, err
	}
	defer conn.Close()
	names := wire.For("")
	if err := stream.Ensure(ctx, conn.JS, names, stream.Config{Partitions: b.o.Partitions, Replicas: target.replicas}); err != nil {
		return res, err
	}
	subjects := make([]string, b.o.Partitions)
	for p := range subjects {
		subjects[p] = names.Subject(wire.Raw, p)
	}

	f, err := os.Open(ds.path)
	if err != nil {
		return res, err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<20)
	acks := make(chan jetstream.PubAckFuture, b0InFlight)
	ackErr := make(chan error, 1)
	go func() {
		var first error
		for fut := range acks {
			select {
			case <-fut.Ok():
			case err := <-fut.Err():
				if first == nil {
					first = err
				}
			}
		}
		ackErr <- first
	}()
	meter := cpuMeter{"bench": os.Getpid()}
	for name, pid := range target.pids {
		meter[name] = pid
	}
	if spec.viaIngest {
		close(acks)
		<-ackErr
		return b.ingestAlone(ctx, conn, names, br, meter)
	}
	cpu0 := meter.read()
	began := time.Now()
	n := 0
	for {
		line, rerr := br.ReadBytes('\n')
		line = bytes.TrimSuffix(line, []byte{'\n'})
		if spec.limit > 0 && n >= spec.limit {
			break
		}
		if len(line) > 0 {
			if n%1024 == 0 && ctx.Err() != nil {
				close(acks)
				return res, ctx.Err()
			}
			m := nats.NewMsg(subjects[ds.part[n]])
			m.Data = line
			m.Header.Set(jetstream.MsgIDHeader, eventID(line))
			fut, err := conn.JS.PublishMsgAsync(m)
			if err != nil {
				close(acks)
				return res, fmt.Errorf("bench: B0 publish: %w", err)
			}
			acks <- fut
			n++
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			close(acks)
			return res, rerr
		}
	}
	close(acks)
	if err := <-ackErr; err != nil {
		return res, fmt.Errorf("bench: B0 publish ack: %w", err)
	}
	res.Publish = time.Since(began)
	res.PublishCPU = sumCPU(meter.since(cpu0))
	res.Records = n

	st, err := rawHolds(ctx, conn.JS, names, uint64(n), "B0")
	if err != nil {
		return res, err
	}
	res.PublishEPS = float64(n) / res.Publish.Seconds()
	if spec.publishOnly {
		return res, nil
	}

	cons, err := st.CreateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "b0", FilterSubject: names.Wildcard(wire.Raw),
		AckPolicy: jetstream.AckAllPolicy, MaxAckPending: 20000,
	})
	if err != nil {
		return res, err
	}
	cpu0 = meter.read()
	began = time.Now()
	var got atomic.Int64
	done := make(chan error, 1)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		got := int(got.Add(1))
		switch {
		case got == n:
			err := m.DoubleAck(ctx)
			select {
			case done <- err:
			default:
			}
		case got%500 == 0:
			if err := m.Ack(); err != nil {
				select {
				case done <- err:
				default:
				}
			}
		}
	}, jetstream.PullMaxMessages(1000))
	if err != nil {
		return res, err
	}
	select {
	case err = <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	cc.Stop()
	if err != nil {
		return res, fmt.Errorf("bench: B0 consume after %d: %w", got.Load(), err)
	}
	res.Consume = time.Since(began)
	res.ConsumeCPU = sumCPU(meter.since(cpu0))
	res.PublishEPS = float64(n) / res.Publish.Seconds()
	res.ConsumeEPS = float64(n) / res.Consume.Seconds()
	return res, nil
}

// ingestAlone publishes every record of br through pkg/ingest with the
// E2E run's options, with no service running, and measures it as B0's
// publish phase is measured: what ingest costs above a raw publish.
func (b *bencher) ingestAlone(ctx context.Context, conn *connect.Conn, names wire.Names, br *bufio.Reader, meter cpuMeter) (b0Result, error) {
	res := b0Result{}
	v, err := contract.NewValidator(contract.Config{})
	if err != nil {
		return res, err
	}
	in := ingest.New(conn.JS, ingest.Config{Partitions: b.o.Partitions, Validator: v, EndOfStream: true,
		Linger: config.WaitsFor(b.o.LatencyBudget).IngestLinger})
	cpu0 := meter.read()
	began := time.Now()
	n := 0
	for {
		line, rerr := br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			if n%1024 == 0 && ctx.Err() != nil {
				in.Close(ctx)
				return res, ctx.Err()
			}
			if err := in.Publish(ctx, line); err != nil {
				in.Close(ctx)
				return res, fmt.Errorf("bench: ingest alone: %w", err)
			}
			n++
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			in.Close(ctx)
			return res, rerr
		}
	}
	if err := in.Close(ctx); err != nil {
		return res, fmt.Errorf("bench: ingest alone: %w", err)
	}
	res.Publish = time.Since(began)
	res.PublishCPU = sumCPU(meter.since(cpu0))
	res.Records = n
	res.PublishEPS = float64(n) / res.Publish.Seconds()
	if _, err := rawHolds(ctx, conn.JS, names, uint64(n)+uint64(in.Stats().Published-in.Stats().Records), "ingest alone"); err != nil {
		return res, err
	}
	return res, nil
}

// eventID returns the event_id of a generated record (the generator writes
// it as a plain string), or a hash-free fallback for a record without one.
func eventID(line []byte) string {
	const key = `"event_id":"`
	i := bytes.Index(line, []byte(key))
	if i < 0 {
		return ""
	}
	rest := line[i+len(key):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return ""
	}
	return string(rest[:j])
}

var errTimeout = errors.New("bench: timed out")

// rawHolds checks that RAW stores want messages after a run, and returns
// the stream.
func rawHolds(ctx context.Context, js jetstream.JetStream, names wire.Names, want uint64, run string) (jetstream.Stream, error) {
	st, err := js.Stream(ctx, names.Stream(wire.Raw))
	if err != nil {
		return nil, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, err
	}
	if info.State.Msgs != want {
		return nil, fmt.Errorf("bench: %s stored %d of %d messages", run, info.State.Msgs, want)
	}
	return st, nil
}
