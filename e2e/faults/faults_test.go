package faults

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/testenv"
)

func TestFailpointsCrashServicesRepeatedly(t *testing.T) {
	d := deploy(t, "windower.before-write=crash@every:41,windower.after-write=crash@every:23,validator.after-publish=crash@every:29,publisher.after-put=crash@every:17", false)
	d.run(nil)
	for _, p := range d.procs {
		if p.Restarts() == 0 {
			t.Errorf("%s never crashed: the failpoints did not fire", p.name)
		}
	}
}

func TestRandomSIGKILLDuringTheWholeRun(t *testing.T) {
	d := deploy(t, "", false)
	kills := 0
	d.run(func(ctx context.Context, _ <-chan struct{}) {
		every(ctx, 200*time.Millisecond, 500*time.Millisecond, func(r *rand.Rand) {
			d.procs[r.IntN(len(d.procs))].kill()
			kills++
		})
	})
	if kills < 5 {
		t.Fatalf("only %d kills", kills)
	}
	t.Logf("%d random SIGKILLs", kills)
}

func TestRedisRestartWithAOF(t *testing.T) {
	d := deploy(t, "", true)
	restarted := false
	d.run(func(ctx context.Context, _ <-chan struct{}) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(1500 * time.Millisecond):
		}
		d.redis.Kill() // SIGKILL: only what appendfsync always wrote survives
		d.redis.Restart(t)
		restarted = true
	})
	if !restarted {
		t.Fatal("redis was not restarted mid-run")
	}
}

func TestNATSServerRestartOnTheSameStore(t *testing.T) {
	d := deploy(t, "", false)
	restarted := false
	var backlog uint64
	// The restart comes once the producer is done, while the services are
	// still working through the backlog: a producer that loses in-flight
	// publishes in a restart re-sends them out of order, which is a
	// different input (see docs/recovery.md), not a fault of the pipeline.
	d.run(func(ctx context.Context, ingested <-chan struct{}) {
		select {
		case <-ctx.Done():
			return
		case <-ingested:
		}
		backlog = d.backlog(ctx)
		d.ns = testenv.RestartNATS(t, d.ns)
		restarted = true
	})
	if !restarted {
		t.Fatal("nats-server was not restarted mid-run")
	}
	t.Logf("restarted nats-server with %d messages still to process", backlog)
	if backlog == 0 {
		t.Fatal("the pipeline had already drained: the restart proved nothing")
	}
}
