package ingest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
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

// TestFileStopsOnAQuietPipe: the end of the context stops File while it
// waits for input that does not come (a quiet pipe, as `tail -f |
// receiptctl ingest` has at SIGTERM); what was read is stored. It waited
// for the next line or the pipe's end before (1 in 4 runs of
// TestSourcesNameTheirMessagesAndLeave under -race hung so, until its
// one-minute deadline).
func TestFileStopsOnAQuietPipe(t *testing.T) {
	data := fixture(t, 30)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, url := testenv.NATS(t)
	_, js := dial(t, url, 0)
	ensure(t, ctx, js)
	pr, pw := io.Pipe()
	defer pw.Close()
	var mu sync.Mutex
	stored := 0
	in := newTestIngester(t, js, func(c *Config) {
		c.SourceID, c.EndOfStream = "quiet", false
		c.OnAck = func(_ string, _ uint64, dup bool) {
			mu.Lock()
			defer mu.Unlock()
			if !dup {
				stored++
			}
		}
	})
	fctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := File(fctx, in, pr, nil)
		done <- err
	}()
	lines := bytes.SplitAfter(data, []byte("\n"))
	for _, l := range lines[:10] {
		if _, err := pw.Write(l); err != nil {
			t.Fatal(err)
		}
	}
	// The pipe stays open and quiet; once the ten are stored, stop.
	testenv.CheckFor(t, 30*time.Second, 10*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		if stored < 10 {
			return fmt.Errorf("%d of 10 records stored", stored)
		}
		return nil
	})
	stop()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("File returned %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("File did not return within 30 s of its context's end, its pipe open and quiet")
	}
}
