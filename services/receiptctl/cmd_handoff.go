package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/boundedrun"
	"github.com/receiptflow/receiptflow/pkg/pipeline"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/wire"
	"github.com/receiptflow/receiptflow/schemas"
)

// cmdHandoff writes the hand-off bundle: a run over the seed fixture with
// every artifact, the source events, the schemas, the sink transaction plan
// and the recovery runbook, and a dump of the dashboard's KV state.
func cmdHandoff(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fset := flag.NewFlagSet("handoff", flag.ContinueOnError)
	fset.SetOutput(stderr)
	out := fset.String("out", "handoff", "bundle directory")
	events := fset.String("events", "e2e/testdata/seed.ndjson", "source events (the seed fixture)")
	docs := fset.String("docs", "docs", "the repository's docs directory")
	if err := parseFlags(fset, args); err != nil {
		return err
	}
	for _, f := range []string{*events, filepath.Join(*docs, "sink-transaction-plan.md"), filepath.Join(*docs, "recovery.md")} {
		if _, err := os.Stat(f); err != nil {
			return usageError("%v (run from the repository root, or pass --events/--docs)", err)
		}
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	var dump map[string]any
	res, err := boundedrun.Run(ctx, boundedrun.Config{
		Config: pipeline.Config{PublisherTick: 200 * time.Millisecond},
		Events: *events, Out: filepath.Join(*out, "run"),
		AfterDrain: func(ctx context.Context, p *pipeline.Pipeline) error {
			// Let the publisher write its health keys once more.
			kv, err := p.KV(ctx)
			if err != nil {
				return err
			}
			// Every 50ms for up to 5s; a key still missing then is not an
			// error (the dump shows it), an ended ctx is.
			if _, err := stream.RetryOp(ctx, stream.Backoff{Initial: 50 * time.Millisecond, Max: 50 * time.Millisecond, For: 5 * time.Second}, nil, nil,
				func(ctx context.Context) (jetstream.KeyValueEntry, error) { return kv.Get(ctx, wire.HealthKey) }); err != nil && ctx.Err() != nil {
				return fmt.Errorf("handoff: waiting for the health keys: %w", err)
			}
			dump, err = dumpKV(ctx, p.Admin.JS, []string{p.Names.Bucket(), wire.ControlBucket})
			return err
		},
	})
	if err != nil {
		return err
	}
	b, _ := json.MarshalIndent(dump, "", "  ")
	if err := os.WriteFile(filepath.Join(*out, "dashboard-state.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	if err := copyFile(*events, filepath.Join(*out, "source", filepath.Base(*events))); err != nil {
		return err
	}
	for _, name := range []string{"sink-transaction-plan.md", "recovery.md", "contract.md"} {
		if err := copyFile(filepath.Join(*docs, name), filepath.Join(*out, "docs", name)); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	err = fs.WalkDir(schemas.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".json") {
			return err
		}
		b, err := schemas.FS.ReadFile(path)
		if err != nil {
			return err
		}
		dst := filepath.Join(*out, "schemas", path)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
	if err != nil {
		return err
	}
	index := fmt.Sprintf(`# receiptflow hand-off bundle

| file | what |
|---|---|
| source/%s | the source events (the seed fixture) |
| schemas/ | the event schemas (v1, v2), the snapshot schema, and examples |
| docs/sink-transaction-plan.md | what each Lua script writes atomically, write/ack order, crash safety, persistence |
| docs/recovery.md | the runbook: rebuild into a separate snapshot, reconcile, switch, roll back |
| docs/contract.md | the event contract |
| run/windows.json | the window results |
| run/trace.ndjson | the replay trace: what happened to every message |
| run/parity.md, run/parity.json | the parity report of the independent batch pass |
| run/late.ndjson, run/rejected.ndjson | events routed to LATE, records rejected |
| run/metrics.json | state size, backlog and correction volume over the run |
| dashboard-state.json | the dashboard's state: a dump of the KV buckets |

Parity holds: %v (%d final windows).
`, filepath.Base(*events), res.Report.Holds, res.Report.Summary.Final)
	if err := os.WriteFile(filepath.Join(*out, "README.md"), []byte(index), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "handoff: bundle written to %s (parity holds: %v)\n", *out, res.Report.Holds)
	if !res.Report.Holds {
		return &exitError{code: 1, msg: "parity failed on the seed fixture"}
	}
	return nil
}

// dumpKV returns every key of the buckets with its value (JSON values
// decoded) and revision.
func dumpKV(ctx context.Context, js jetstream.JetStream, buckets []string) (map[string]any, error) {
	out := map[string]any{}
	for _, name := range buckets {
		kv, err := js.KeyValue(ctx, name)
		if err != nil {
			return nil, err
		}
		w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
		if err != nil {
			return nil, err
		}
		entries := map[string]any{}
		for e := range w.Updates() {
			if e == nil {
				break
			}
			var v any
			if json.Unmarshal(e.Value(), &v) != nil {
				v = string(e.Value())
			}
			entries[e.Key()] = map[string]any{"revision": e.Revision(), "value": v}
		}
		w.Stop()
		out[name] = entries
	}
	return out, nil
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o644)
}
