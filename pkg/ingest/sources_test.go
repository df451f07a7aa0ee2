package ingest

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// rawSources reads RAW: per source id, its records and heartbeats, and
// its leaving heartbeats' partitions.
type rawSource struct {
	records, heartbeats int
	left                map[string]bool
}

func rawSources(t *testing.T, ctx context.Context, js jetstream.JetStream) map[string]*rawSource {
	t.Helper()
	out := map[string]*rawSource{}
	err := stream.ReadAll(ctx, js, wire.Raw, func(m jetstream.Msg) error {
		h := m.Headers()
		id := h.Get(wire.HdrSource)
		s := out[id]
		if s == nil {
			s = &rawSource{left: map[string]bool{}}
			out[id] = s
		}
		switch {
		case h.Get(wire.HdrHeartbeat) == "":
			s.records++
		case h.Get(wire.HdrLeave) == "1":
			s.left[m.Subject()] = true
		default:
			s.heartbeats++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSourcesNameTheirMessagesAndLeave (docs/spec.md §3.1): two sources
// with the same records (so the same progress and heartbeat tags) each
// store their own heartbeats, every message carries its source's id, and
// each leaves every partition at its end: one on a clean end, the other
// when its context ends mid-file (SIGTERM), after what it queued is stored.
func TestSourcesNameTheirMessagesAndLeave(t *testing.T) {
	data := fixture(t, 1200)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, url := testenv.NATS(t)
	_, js := dial(t, url, 0)
	ensure(t, ctx, js)
	clean := newTestIngester(t, js, func(c *Config) { c.SourceID, c.EndOfStream = "clean", false })
	if _, err := File(ctx, clean, bytes.NewReader(data), nil); err != nil {
		t.Fatal(err)
	}

	// The second reads a pipe that stops after 700 lines; its context
	// ends there, as SIGTERM ends receiptctl ingest's.
	// Other events than the clean source's, so that RAW stores them.
	data = bytes.ReplaceAll(data, []byte(`"event_id":"`), []byte(`"event_id":"t-`))
	pr, pw := io.Pipe()
	sctx, stop := context.WithCancel(ctx)
	go func() {
		lines := bytes.SplitAfter(data, []byte("\n"))
		for _, l := range lines[:700] {
			if _, err := pw.Write(l); err != nil {
				return
			}
		}
		stop()
		// Hold the pipe open: the reader is stopped by the context.
		<-ctx.Done()
		pw.Close()
	}()
	stored := 0
	term := newTestIngester(t, js, func(c *Config) {
		c.SourceID, c.EndOfStream = "terminated", false
		c.OnAck = func(_ string, _ uint64, dup bool) {
			if !dup {
				stored++
			}
		}
	})
	if _, err := File(sctx, term, pr, nil); err == nil {
		t.Fatal("File returned nil after its context ended")
	}
	got := rawSources(t, ctx, js)
	if s := got[wire.SourceLegacy]; s != nil {
		t.Fatalf("%d records and %d heartbeats without a source id", s.records, s.heartbeats)
	}
	c, tm := got["clean"], got["terminated"]
	if c == nil || tm == nil {
		t.Fatalf("sources in RAW: %v", got)
	}
	if c.records == 0 || c.heartbeats != 2*testPartitions || len(c.left) != testPartitions {
		t.Errorf("clean source: %d records, %d heartbeats, left %d partitions; want its 2 heartbeats (every 500 records) and a leave to each of %d partitions",
			c.records, c.heartbeats, len(c.left), testPartitions)
	}
	if tm.records != stored || stored < 600 || tm.heartbeats != testPartitions || len(tm.left) != testPartitions {
		t.Errorf("terminated source: %d records in RAW (%d confirmed), %d heartbeats, left %d partitions; want what it queued of its 700 lines stored, its heartbeat after 500 records, and a leave to each of %d",
			tm.records, stored, tm.heartbeats, len(tm.left), testPartitions)
	}
}
