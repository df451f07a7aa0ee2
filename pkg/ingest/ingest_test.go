package ingest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// lines splits data into its lines, without newlines.
func lines(data []byte) [][]byte {
	var out [][]byte
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		out = append(out, append([]byte(nil), sc.Bytes()...))
	}
	return out
}

// TestStoppedServerNamesFirstUnconfirmed stops nats-server for good in the
// middle of an ingest and asserts that File fails with an
// *UnconfirmedError naming a line and that line's event id, and that
// every record before that line is in RAW (read after a restart).
func TestStoppedServerNamesFirstUnconfirmed(t *testing.T) {
	data := fixture(t, 20000)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, url := testenv.NATS(t)
	_, js := dial(t, url, 0)
	ensure(t, ctx, js)
	var acks atomic.Int64
	kick := make(chan struct{}, 1)
	in := newTestIngester(t, js, func(o *Config) {
		o.RetryFor = time.Second
		o.OnAck = func(string, uint64, bool) {
			if acks.Add(1) == 5000 {
				kick <- struct{}{}
			}
		}
	})
	done := make(chan error, 1)
	go func() {
		_, err := File(ctx, in, bytes.NewReader(data), nil)
		done <- err
	}()
	var err error
	select {
	case <-kick:
		s.Shutdown()
		err = <-done
	case err = <-done:
		t.Fatalf("ingest ended before the server was stopped: %v", err)
	}
	var ue *UnconfirmedError
	if !errors.As(err, &ue) {
		t.Fatalf("ingest with the server stopped: %v, want an *UnconfirmedError", err)
	}
	all := lines(data)
	if ue.Line < 1 || ue.Line > int64(len(all)) {
		t.Fatalf("%v: line %d is not in the file (%d lines)", err, ue.Line, len(all))
	}
	if id := eventIDOf(all[ue.Line-1]); id == "" || ue.EventID != id {
		t.Fatalf("%v: names event id %q, line %d has %q", err, ue.EventID, ue.Line, id)
	}
	if !strings.Contains(err.Error(), "line "+itoa(ue.Line)) || !strings.Contains(err.Error(), ue.EventID) {
		t.Fatalf("error %q does not name line %d and event id %s", err, ue.Line, ue.EventID)
	}
	if ue.Line < 5000 {
		t.Fatalf("%v: line %d, but at least 5000 records were confirmed", err, ue.Line)
	}

	s = testenv.RestartNATS(t, s)
	_, js = dial(t, embeddedURL(s), 0)
	_, seqs := rawOrder(t, ctx, js)
	builder := newTestIngester(t, js, nil)
	defer builder.Close(ctx)
	for i, l := range all[:ue.Line-1] {
		if len(bytes.TrimSpace(l)) == 0 {
			continue
		}
		it, _, _ := builder.build(l)
		if _, ok := seqs[it.id]; !ok {
			t.Fatalf("line %d (%s), before the first unconfirmed line %d, is not in RAW", i+1, it.id, ue.Line)
		}
	}
}

// TestOnAckSequences asserts that OnAck reports every record, in order,
// with its RAW sequence (the original's for a duplicate).
func TestOnAckSequences(t *testing.T) {
	data := fixture(t, 5000)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, url := testenv.NATS(t)
	_, js := dial(t, url, 0)
	ensure(t, ctx, js)
	type ack struct {
		id  string
		seq uint64
		dup bool
	}
	var got []ack
	in := newTestIngester(t, js, func(o *Config) {
		o.OnAck = func(id string, seq uint64, dup bool) { got = append(got, ack{id, seq, dup}) }
	})
	st, err := File(ctx, in, bytes.NewReader(data), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, seqs := rawOrder(t, ctx, js)
	if int64(len(got)) != st.Records {
		t.Fatalf("OnAck called %d times for %d records", len(got), st.Records)
	}
	dups := 0
	var last uint64
	for i, a := range got {
		if want, ok := seqs[a.id]; !ok || want != a.seq {
			t.Fatalf("ack %d: %s at sequence %d, RAW has it at %d (stored: %v)", i, a.id, a.seq, want, ok)
		}
		if a.dup {
			dups++
			continue
		}
		if a.seq <= last {
			t.Fatalf("ack %d: %s stored at %d, after %d", i, a.id, a.seq, last)
		}
		last = a.seq
	}
	if dups == 0 || int64(dups) != st.Duplicates {
		t.Fatalf("%d duplicate acks, stats say %d; the fixture has retries", dups, st.Duplicates)
	}
}

// TestRepublishIsDuplicates publishes a file twice: the second time every
// record is a duplicate and RAW is unchanged (the server refuses the
// atomic batches, and the committer confirms their messages one by one).
func TestRepublishIsDuplicates(t *testing.T) {
	data := fixture(t, 3000)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, url := testenv.NATS(t)
	_, js := dial(t, url, 0)
	ensure(t, ctx, js)
	if _, err := File(ctx, newTestIngester(t, js, nil), bytes.NewReader(data), nil); err != nil {
		t.Fatal(err)
	}
	want, _ := rawOrder(t, ctx, js)
	st, err := File(ctx, newTestIngester(t, js, nil), bytes.NewReader(data), nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := st.Records + st.Heartbeats*testPartitions; st.Duplicates != want {
		t.Fatalf("second ingest: %d duplicates of %d records and heartbeat messages", st.Duplicates, want)
	}
	got, _ := rawOrder(t, ctx, js)
	if d := diffOrder(want, got); d != "" {
		t.Fatalf("RAW changed by publishing the file again: %s", d)
	}
}

// TestBOMSkipped ingests a file that starts with a UTF-8 byte-order mark:
// the first record is stored as the valid record it is, without the mark.
func TestBOMSkipped(t *testing.T) {
	data := fixture(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, url := testenv.NATS(t)
	_, js := dial(t, url, 0)
	ensure(t, ctx, js)
	st, err := File(ctx, newTestIngester(t, js, nil), bytes.NewReader(append([]byte("\ufeff"), data...)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Invalid != 0 {
		t.Fatalf("%d invalid-looking records; the BOM was taken for part of the first", st.Invalid)
	}
	first := lines(data)[0]
	var firstMsg jetstream.Msg
	if err := stream.ReadAll(ctx, js, wire.Raw, func(m jetstream.Msg) error {
		if firstMsg == nil {
			firstMsg = m
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if firstMsg == nil || bytes.HasPrefix(firstMsg.Data(), []byte("\ufeff")) ||
		!strings.HasPrefix(firstMsg.Headers().Get(jetstream.MsgIDHeader), eventIDOf(first)+":") {
		t.Fatalf("first RAW message %v does not hold the first record %s", firstMsg, first)
	}
}

// TestPublishHonoursContext fills the queue of an Ingester whose server is
// gone and asserts that Publish returns ctx's error when ctx ends, instead
// of waiting for the retries.
func TestPublishHonoursContext(t *testing.T) {
	data := lines(fixture(t, 50))
	s, url := testenv.NATS(t)
	ctx := context.Background()
	_, js := dial(t, url, 0)
	ensure(t, ctx, js)
	s.Shutdown()
	in := newTestIngester(t, js, func(o *Config) { o.MaxInFlight = 4; o.RetryFor = time.Minute })
	pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	var err error
	for _, l := range data {
		if err = in.Publish(pctx, l); err != nil {
			break
		}
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Publish with a full queue and an ended context: %v, want %v", err, context.DeadlineExceeded)
	}
	cctx, ccancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer ccancel()
	var ue *UnconfirmedError
	if err := in.Close(cctx); !errors.As(err, &ue) || ue.Line != 1 {
		t.Fatalf("Close with nothing stored: %v, want an *UnconfirmedError naming line 1", err)
	}
}

// TestPublishEndedContextQueuesNothing asserts that Publish with an ended
// context returns its error for a record and for a blank line alike, and
// that neither is counted.
func TestPublishEndedContextQueuesNothing(t *testing.T) {
	data := lines(fixture(t, 1))
	_, url := testenv.NATS(t)
	ctx := context.Background()
	_, js := dial(t, url, 0)
	ensure(t, ctx, js)
	in := newTestIngester(t, js, nil)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	for _, l := range [][]byte{data[0], []byte("  ")} {
		if err := in.Publish(cctx, l); !errors.Is(err, context.Canceled) {
			t.Errorf("Publish(%q) with a cancelled context: %v, want %v", l, err, context.Canceled)
		}
	}
	if st := in.Stats(); st.Records != 0 || st.Published != 0 {
		t.Errorf("stats after publishes with a cancelled context: %+v, want none", st)
	}
}

// TestFilePacedAsksBeforeEachLine: the pace is asked before each line is
// read, numbered from 0, and an error from it stops the file there, with
// the lines before it stored.
func TestFilePacedAsksBeforeEachLine(t *testing.T) {
	data := fixture(t, 30)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, url := testenv.NATS(t)
	_, js := dial(t, url, 0)
	ensure(t, ctx, js)
	var asked []int
	stop := errors.New("held")
	st, err := FilePaced(ctx, newTestIngester(t, js, nil), bytes.NewReader(data), func(_ context.Context, n int) error {
		asked = append(asked, n)
		if n == 20 {
			return stop
		}
		return nil
	}, nil)
	if !errors.Is(err, stop) {
		t.Fatalf("err = %v, want the pace's", err)
	}
	if st.Records != 20 || len(asked) != 21 || asked[0] != 0 || asked[20] != 20 {
		t.Fatalf("%d records stored, pace asked for %v; want 20 stored, asked for 0..20", st.Records, asked)
	}
}
