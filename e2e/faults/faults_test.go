package faults

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/testenv"
)

func TestFailpointsCrashServicesRepeatedly(t *testing.T) {
	d := deploy(t, "windower.before-write=crash@every:13,windower.after-write=crash@every:7,validator.after-publish=crash@every:9,publisher.after-put=crash@every:5", false)
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
	d.run(func(ctx context.Context) {
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
	d.run(func(ctx context.Context) {
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
	d.run(func(ctx context.Context) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(1500 * time.Millisecond):
		}
		d.ns = testenv.RestartNATS(t, d.ns)
		restarted = true
	})
	if !restarted {
		t.Fatal("nats-server was not restarted mid-run")
	}
}
