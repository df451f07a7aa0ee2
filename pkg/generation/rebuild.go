package generation

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/config"
	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/pipeline"
	"github.com/receiptflow/receiptflow/pkg/reconcile"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// RebuildConfig configures a rebuild.
type RebuildConfig struct {
	// Config must name the target generation and real servers (NATSURL,
	// RedisURL): a rebuild works on a running deployment.
	pipeline.Config
	// NoSwitch reconciles but leaves the pointer alone.
	NoSwitch bool
	// Progress receives progress lines (nil: none).
	Progress io.Writer
	// BeforeParity, if set, runs after the rebuild drained and before the
	// batch pass (tests use it to corrupt the new generation).
	BeforeParity func(ctx context.Context, p *pipeline.Pipeline) error
	// Params, when set, are the target generation's parameters as the
	// set-up records them (the Config's must be the same); a target that
	// has a record already must agree with them.
	Params config.Params
}

// RebuildResult is what a rebuild did.
type RebuildResult struct {
	Report   *reconcile.Report
	Parity   Parity
	Switched bool
	Pointer  Pointer
}

// Rebuild replays RAW from its first sequence through a validator, windower
// and publisher of the target generation (separate streams, Redis keys and
// KV bucket), waits until they drain, runs the batch pass over the same RAW
// range, records the parity and, only when it holds, switches the
// active-generation pointer to the target.
func Rebuild(ctx context.Context, rc RebuildConfig) (*RebuildResult, error) {
	if rc.NATSURL == "" || rc.RedisURL == "" {
		return nil, errors.New("generation: rebuild needs --nats-url and --redis-url of the running deployment")
	}
	gen := wire.For(rc.Generation).Generation
	if gen == wire.DefaultGeneration && rc.Generation == "" {
		return nil, errors.New("generation: rebuild needs a target --generation")
	}
	if rc.Params != (config.Params{}) {
		if err := checkRecord(ctx, rc.NATSURL, gen, rc.Params); err != nil {
			return nil, err
		}
		rc.Stream.Record = rc.Params.Record(gen)
	}
	p, err := pipeline.Start(ctx, rc.Config)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	active, _, err := Active(ctx, p.Admin.JS)
	if err != nil {
		return nil, err
	}
	if active.Generation == gen {
		return nil, fmt.Errorf("generation: %s is the active generation; rebuild into a new one", gen)
	}
	logf(rc.Progress, "rebuild: generation %s from RAW (active generation %s)", gen, active.Generation)
	began := time.Now()
	if err := p.WaitDrained(ctx, func(b map[string]uint64) {}); err != nil {
		return nil, fmt.Errorf("generation: waiting for the rebuild to drain: %w", err)
	}
	logf(rc.Progress, "rebuild: drained in %.1fs", time.Since(began).Seconds())
	if rc.BeforeParity != nil {
		if err := rc.BeforeParity(ctx, p); err != nil {
			return nil, err
		}
	}
	cfg := p.Config()
	rep, last, err := Reconcile(ctx, p.Admin.JS, p.Names, reconcile.Config{
		Validator: p.Validator, Partitions: cfg.Partitions, HotKeys: cfg.HotKeys,
		Lateness: cfg.Lateness, Grace: cfg.Grace, Horizon: cfg.ReplayHorizon, SourceIdle: cfg.SourceIdle,
	})
	if err != nil {
		return nil, err
	}
	res := &RebuildResult{Report: rep, Parity: Parity{Generation: gen, Holds: rep.Holds, CheckedAt: time.Now().UTC(), RawLastSeq: last, Summary: rep.Summary}}
	if err := RecordParity(ctx, p.Admin.JS, res.Parity); err != nil {
		return nil, err
	}
	logf(rc.Progress, "rebuild: parity %s over RAW 1..%d (%d final windows, %d unexplained differences)",
		map[bool]string{true: "holds", false: "FAILS"}[rep.Holds], last, rep.Summary.Final, rep.Summary.UnexplainedDifferences)
	if !rep.Holds || rc.NoSwitch {
		return res, nil
	}
	if res.Pointer, err = Switch(ctx, p.Admin.JS, gen, false); err != nil {
		return res, err
	}
	res.Switched = true
	logf(rc.Progress, "rebuild: switched readers from generation %s to %s", res.Pointer.Previous, gen)
	return res, nil
}

// Reconcile runs the batch pass over the whole RAW stream as it is now
// (reconcile.CountRaw: RAW order, heartbeats and broker timestamps, the
// referee's own watermarks) and compares it with generation n's windows
// and late rows. It returns the report and the last RAW sequence the pass
// read. opts must carry the pipeline's partitioning, lateness, grace and
// replay horizon.
func Reconcile(ctx context.Context, js jetstream.JetStream, n wire.Names, opts reconcile.Config) (*reconcile.Report, uint64, error) {
	b, last, err := reconcile.CountRaw(ctx, js, wire.Raw, opts)
	if err != nil {
		return nil, 0, err
	}
	windows, err := pipeline.ReadWindows(ctx, js, n)
	if err != nil {
		return nil, 0, err
	}
	late, err := pipeline.ReadLate(ctx, js, n)
	if err != nil {
		return nil, 0, err
	}
	return reconcile.Compare(b, windows, late), last, nil
}

// checkRecord fails when generation gen has recorded parameters other
// than want (config.ErrDisagrees).
func checkRecord(ctx context.Context, url, gen string, want config.Params) error {
	conn, err := connect.ConnectNATS(url, "receiptctl-rebuild")
	if err != nil {
		return err
	}
	defer conn.Close()
	meta, err := config.Recorded(ctx, conn.JS)
	if err != nil {
		return err
	}
	_, err = want.Adopt(meta, gen, func(string) bool { return true })
	return err
}

func logf(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, format+"\n", args...)
	}
}
