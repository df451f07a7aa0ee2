package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/generation"
	"github.com/receiptflow/receiptflow/pkg/pipeline"
	"github.com/receiptflow/receiptflow/pkg/reconcile"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// corruptWindow rewrites one final window snapshot of generation gen with a
// wrong count (as a bug or a bad manual edit would).
func corruptWindow(t *testing.T, ctx context.Context, p *connect.Conn, gen, id string) {
	t.Helper()
	kv, err := p.JS.KeyValue(ctx, wire.For(gen).Bucket())
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, wire.WindowKey(id))
	if err != nil {
		t.Fatal(err)
	}
	var w wire.Window
	if err := json.Unmarshal(e.Value(), &w); err != nil {
		t.Fatal(err)
	}
	w.Count += 3
	b, _ := json.Marshal(w)
	if _, err := kv.Put(ctx, wire.WindowKey(id), b); err != nil {
		t.Fatal(err)
	}
}

func TestRebuildRepairsACorruptGenerationAndSwitchesOnlyAfterParity(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, natsURL := testenv.NATS(t)
	r := testenv.RedisServer(t)
	base := pipeline.Config{NATSURL: natsURL, RedisURL: r.URL()}
	o := troubled
	o.Events = 5000
	path, _ := writeGenerated(t, o)
	live := runFile(t, base, path) // generation 1, the live one
	victim := live.Windows[2].WindowID

	admin, err := connect.ConnectNATS(natsURL, "test-admin")
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	v, err := contract.NewValidator(contract.Config{})
	if err != nil {
		t.Fatal(err)
	}
	corruptWindow(t, ctx, admin, "1", victim)
	rep, _, err := generation.Reconcile(ctx, admin.JS, wire.For("1"), reconcile.Config{Validator: v, Partitions: 8})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Holds {
		t.Fatal("reconcile did not notice the corrupted live window")
	}

	// Rebuild into generation 2: parity holds, readers are switched.
	cfg := base
	cfg.Generation = "2"
	res, err := generation.Rebuild(ctx, generation.RebuildConfig{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Report.Holds || !res.Switched {
		t.Fatalf("rebuild 2: holds %v switched %v: %+v", res.Report.Holds, res.Switched, res.Report.Unexplained)
	}
	ptr, _, err := generation.Active(ctx, admin.JS)
	if err != nil || ptr.Generation != "2" || ptr.Previous != "1" {
		t.Fatalf("pointer = %+v, %v", ptr, err)
	}
	rebuilt, err := pipeline.ReadWindows(ctx, admin.JS, wire.For("2"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := project(rebuilt), project(live.Windows); !reflect.DeepEqual(got, want) {
		t.Fatalf("rebuilt windows differ from the clean live run:\n got %+v\nwant %+v", got, want)
	}

	// A rebuild whose parity fails never switches.
	cfg.Generation = "3"
	res, err = generation.Rebuild(ctx, generation.RebuildConfig{Config: cfg, BeforeParity: func(ctx context.Context, p *pipeline.Pipeline) error {
		corruptWindow(t, ctx, p.Admin, "3", victim)
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Report.Holds || res.Switched {
		t.Fatalf("rebuild 3 with a corrupted window: holds %v switched %v", res.Report.Holds, res.Switched)
	}
	if ptr, _, _ := generation.Active(ctx, admin.JS); ptr.Generation != "2" {
		t.Fatalf("pointer moved to %s after a failed rebuild", ptr.Generation)
	}
	// A manual switch to it is refused; so is a rollback to the corrupt 1
	// (its parity never passed) unless forced.
	if _, err := generation.Switch(ctx, admin.JS, "3", false); !errors.Is(err, generation.ErrNoParity) {
		t.Fatalf("switch 3: %v", err)
	}
	if _, err := generation.Switch(ctx, admin.JS, "1", false); !errors.Is(err, generation.ErrNoParity) {
		t.Fatalf("switch 1: %v", err)
	}
	if p, err := generation.Switch(ctx, admin.JS, "1", true); err != nil || !p.Forced || p.Previous != "2" {
		t.Fatalf("forced rollback: %+v, %v", p, err)
	}
}
