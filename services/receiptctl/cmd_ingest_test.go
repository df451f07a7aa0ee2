package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/traffic"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// TestIngestExitsOneNamingFirstUnconfirmed feeds `receiptctl ingest`
// through a named pipe: the first part of a file, then, once RAW holds
// messages, the server is stopped for good and the rest follows. The
// command must exit 1 naming a line of the file and that line's event id
// (docs/spec.md §4 and §6), never 0.
func TestIngestExitsOneNamingFirstUnconfirmed(t *testing.T) {
	o := traffic.DefaultConfig()
	o.Events = 6000
	var data bytes.Buffer
	if _, err := traffic.Write(&data, o); err != nil {
		t.Fatal(err)
	}
	// The fixture has too_large records: longer than a bufio.Scanner's
	// default token.
	lines := bytes.Split(bytes.TrimSuffix(data.Bytes(), []byte("\n")), []byte("\n"))
	fifo := filepath.Join(t.TempDir(), "events")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	s, url := testenv.NATS(t)
	js := testenv.JetStream(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := stream.Ensure(ctx, js, wire.For(""), stream.Config{Partitions: 8}); err != nil {
		t.Fatal(err)
	}

	type result struct {
		code     int
		out, err string
	}
	done := make(chan result, 1)
	go func() {
		var out, errb bytes.Buffer
		code := run(ctx, []string{"ingest", "--events", fifo, "--nats-url", url, "--partitions", "8", "--retry-for", "1s"}, &out, &errb)
		done <- result{code, out.String(), errb.String()}
	}()
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	half := len(lines) / 2
	for _, l := range lines[:half] {
		w.Write(append(l[:len(l):len(l)], '\n'))
	}
	testenv.CheckFor(t, time.Minute, 20*time.Millisecond, func() error {
		select {
		case res := <-done:
			t.Fatalf("ingest ended before the server was stopped: exit %d\n%s\n%s", res.code, res.out, res.err)
		default:
		}
		st, err := js.Stream(ctx, wire.Raw)
		if err != nil {
			return err
		}
		if n := st.CachedInfo().State.Msgs; n < 1000 {
			return fmt.Errorf("RAW holds %d messages", n)
		}
		return nil
	})
	s.Shutdown()
	for _, l := range lines[half:] {
		if _, err := w.Write(append(l[:len(l):len(l)], '\n')); err != nil {
			break // the command gave up and closed the pipe
		}
	}
	w.Close()
	res := <-done
	t.Logf("stderr: %s", res.err)
	if res.code != 1 {
		t.Fatalf("ingest with the server stopped: exit %d, want 1\n%s\n%s", res.code, res.out, res.err)
	}
	m := regexp.MustCompile(`line (\d+) \(event_id "([^"]*)"\) not confirmed stored in RAW`).FindStringSubmatch(res.err)
	if m == nil {
		t.Fatalf("stderr does not name the first unconfirmed record:\n%s", res.err)
	}
	n, _ := strconv.Atoi(m[1])
	if n < 1 || n > len(lines) {
		t.Fatalf("named line %d of %d:\n%s", n, len(lines), res.err)
	}
	var rec struct {
		EventID string `json:"event_id"`
	}
	if err := json.Unmarshal(lines[n-1], &rec); err != nil || rec.EventID != m[2] {
		t.Fatalf("named event id %q, line %d has %q (%v):\n%s", m[2], n, rec.EventID, err, res.err)
	}
}
