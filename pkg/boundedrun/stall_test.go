package boundedrun

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/failpoint"
	"github.com/receiptflow/receiptflow/pkg/ingest"
	"github.com/receiptflow/receiptflow/pkg/pipeline"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/traffic"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// TestDrainProgressIsEachStagesOwn: a validator that crashes after every
// publish never acknowledges RAW, while the windower keeps acknowledging
// new VALID messages (here heartbeat frames written straight to VALID,
// standing in for the frames of other RAW ranges such a validator
// re-publishes after each restart). The drain must name the validator
// stuck; before, any consumer's floor moving counted as progress of the
// whole run, and it waited until its context ended (the race-mode CI
// failure of TestRunStopsWhenStuck/validator).
func TestDrainProgressIsEachStagesOwn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	fps, err := failpoint.Parse("validator.after-publish=crash@every:1", failpoint.InProcess)
	if err != nil {
		t.Fatal(err)
	}
	p, err := pipeline.Start(ctx, pipeline.Config{DataDir: t.TempDir(), Failpoints: fps})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var buf bytes.Buffer
	if _, err := traffic.Write(&buf, traffic.Config{Seed: 5, Events: 40, Start: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), Hours: 1}); err != nil {
		t.Fatal(err)
	}
	in := ingest.New(p.Admin.JS, ingest.Config{Partitions: p.Config().Partitions, Validator: p.Validator, EndOfStream: true})
	if _, err := ingest.File(ctx, in, &buf, nil); err != nil {
		t.Fatal(err)
	}

	// The windower's floor moves every 100 ms until the drain returns.
	feed, stopFeed := context.WithCancel(ctx)
	fed := make(chan int)
	go func() {
		n := 0
		defer func() { fed <- n }()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-feed.Done():
				return
			case <-tick.C:
			}
			f := wire.Frame{Partition: 0, Records: []wire.FrameRecord{{Kind: wire.FrameHeartbeat, RawSeq: 1}}}
			msg := stream.NewMsg(p.Names.Subject(wire.Valid, 0), fmt.Sprintf("test-feed-%d", n), wire.AppendFrame(nil, &f))
			msg.Header.Set(wire.HdrFrame, fmt.Sprint(wire.FrameVersion))
			if _, err := p.Admin.JS.PublishMsg(feed, msg); err == nil {
				n++
			}
		}
	}()

	err = drain(ctx, p, 2*time.Second)
	stopFeed()
	n := <-fed
	var stuck *StuckError
	if !errors.As(err, &stuck) {
		t.Fatalf("drain = %v, want a *StuckError (fed %d frames to VALID)", err, n)
	}
	if !slices.Equal(stuck.Stages, []string{pipeline.Validator}) {
		t.Errorf("stuck stages %v, want [%s]: %v", stuck.Stages, pipeline.Validator, err)
	}
	if stuck.Crashes[pipeline.Validator] == 0 {
		t.Errorf("stuck %v: the validator's crashes are not counted", err)
	}
	if n < 10 {
		t.Errorf("only %d frames fed: the windower did not keep moving", n)
	}
	t.Logf("%v (fed %d frames)", err, n)
}
