package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/lease"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// TestStatusListsGroupMembers: receiptctl status lists every live member
// of each group with its partitions and lease age, and the partitions no
// member holds.
func TestStatusListsGroupMembers(t *testing.T) {
	_, url := testenv.NATS(t)
	js := testenv.JetStream(t, url)
	n := wire.For("")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := stream.Ensure(ctx, js, n, stream.Config{}); err != nil {
		t.Fatal(err)
	}
	var gs []*lease.Group
	for _, id := range []string{"wa", "wb"} {
		g, err := lease.Join(ctx, js, lease.Config{Bucket: n.LeaseBucket(), Kind: "windower", ID: id, Partitions: 4, TTL: 5 * time.Second, Info: "127.0.0.1:9" + id[1:]})
		if err != nil {
			t.Fatal(err)
		}
		go g.Run(ctx)
		go func() { // a service with nothing to drain
			for range g.Changed() {
				if ex := g.Excess(); len(ex) > 0 {
					_ = g.Release(ctx, ex...)
				}
			}
		}()
		gs = append(gs, g)
	}
	var out string
	testenv.CheckFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		var stdout, stderr bytes.Buffer
		if code := run(ctx, []string{"status", "--nats-url", url, "--partitions", "4"}, &stdout, &stderr); code != 0 {
			return fmt.Errorf("exit %d: %s", code, stderr.String())
		}
		out = stdout.String()
		for _, want := range []string{"windower: 2 live in the group", "wa ", "wb ", "validator: 0 live", "not held by a group member: 0,1,2,3"} {
			if !strings.Contains(out, want) {
				return fmt.Errorf("no %q in:\n%s", want, out)
			}
		}
		if len(gs[0].Owned()) != 2 || len(gs[1].Owned()) != 2 {
			return fmt.Errorf("not settled")
		}
		if !strings.Contains(out, "0,1") && !strings.Contains(out, "2,3") && !strings.Contains(out, "0,2") {
			return fmt.Errorf("no partitions listed:\n%s", out)
		}
		return nil
	})
	t.Log(out)
}
