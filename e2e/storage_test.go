package e2e

import (
	"context"
	"io"
	"log/slog"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/ingest"
	"github.com/receiptflow/receiptflow/pkg/pipeline"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/windower"
)

// ingestHalves ingests the first half of path, calls between, then the
// rest (closing every window), and waits for the pipeline to drain.
func ingestHalves(t *testing.T, p *pipeline.Pipeline, path string, between func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	half := len(lines) / 2
	in := ingest.New(p.Admin.JS, ingest.Config{Partitions: 8, Validator: p.Validator, EndOfStream: true,
		Now: func() time.Time { return time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC) }})
	for _, l := range lines[:half] {
		if err := in.Publish(ctx, []byte(l)); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.WaitDrained(ctx, nil); err != nil {
		t.Fatal(err)
	}
	between()
	for _, l := range lines[half:] {
		if err := in.Publish(ctx, []byte(l)); err != nil {
			t.Fatal(err)
		}
	}
	if err := in.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitDrained(ctx, nil); err != nil {
		t.Fatal(err)
	}
}

func cleanWindows(t *testing.T, path string) []comparable {
	t.Helper()
	res := runFile(t, pipeline.Config{DataDir: t.TempDir()}, path)
	return project(res.Windows)
}

// TestRedisComingBackEmptyReplaysToTheSameResult: Redis without
// persistence is killed and restarted empty mid-run. The windower notices
// its checkpoint regressed (counted in
// receiptflow_windower_state_regressions_total), resumes from VALID's
// start and rebuilds the same state; the final windows equal a clean run's.
func TestRedisComingBackEmptyReplaysToTheSameResult(t *testing.T) {
	o := troubled
	o.Events = 6000
	path, _ := writeGenerated(t, o)
	want := cleanWindows(t, path)
	_, natsURL := testenv.NATS(t)
	r := testenv.RedisServer(t)
	reg := prometheus.NewRegistry()
	p, err := pipeline.Start(context.Background(), pipeline.Config{NATSURL: natsURL, RedisURL: r.URL(), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ingestHalves(t, p, path, func() {
		r.Kill()
		r.Restart(t) // no AOF, no RDB: Redis is empty
	})
	got, err := p.Windows(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(project(got), want) {
		t.Fatalf("after Redis came back empty:\n got %+v\nwant %+v", project(got), want)
	}
	if n := testenv.CounterSum(t, reg, "receiptflow_windower_state_regressions_total"); n == 0 {
		t.Fatal("the windower never noticed the regressed checkpoint")
	}
}

// TestScriptFlushMidRunChangesNothing flushes the script cache repeatedly
// while events flow: every script call falls back from EVALSHA to EVAL.
func TestScriptFlushMidRunChangesNothing(t *testing.T) {
	o := troubled
	o.Events = 6000
	path, _ := writeGenerated(t, o)
	want := cleanWindows(t, path)
	_, natsURL := testenv.NATS(t)
	r := testenv.RedisServer(t)
	p, err := pipeline.Start(context.Background(), pipeline.Config{NATSURL: natsURL, RedisURL: r.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithCancel(context.Background())
	flushes := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if p.Redis.ScriptFlush(ctx).Err() == nil {
				flushes++
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	ingestHalves(t, p, path, func() {})
	cancel()
	<-done
	got, err := p.Windows(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(project(got), want) {
		t.Fatalf("after %d SCRIPT FLUSHes:\n got %+v\nwant %+v", flushes, project(got), want)
	}
	if flushes < 5 {
		t.Fatalf("only %d flushes", flushes)
	}
}

// TestCheckpointAheadOfTheStreamStopsLoudly: JetStream lost its tail (the
// checkpoint in Redis is past VALID's last sequence). The windower refuses
// to start and names the runbook entry.
func TestCheckpointAheadOfTheStreamStopsLoudly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, natsURL := testenv.NATS(t)
	r := testenv.RedisServer(t)
	p, err := pipeline.Start(ctx, pipeline.Config{NATSURL: natsURL, RedisURL: r.URL(), Services: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Redis.HSet(ctx, p.Store.Keys().Checkpoint(3), "seq", 1_000_000).Err(); err != nil {
		t.Fatal(err)
	}
	conn, err := connect.ConnectNATS(natsURL, "windower-test")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	w := windower.New(conn.JS, p.Store, windower.Config{Names: p.Names, Partitions: 8, Owned: []int{3},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	err = w.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "ahead of the stream") || !strings.Contains(err.Error(), "docs/recovery.md") {
		t.Fatalf("windower with a checkpoint ahead of the stream: %v", err)
	}
}
