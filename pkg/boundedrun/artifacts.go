package boundedrun

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"

	"github.com/receiptflow/receiptflow/pkg/dashboard"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

func (r *Result) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	writeJSON := func(name string, v any) error {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, name), append(b, '\n'), 0o644)
	}
	writeNDJSON := func(name string, n int, row func(i int) any) error {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		enc := json.NewEncoder(f)
		for i := 0; i < n; i++ {
			if err := enc.Encode(row(i)); err != nil {
				f.Close()
				return err
			}
		}
		return f.Close()
	}
	windows := r.Windows
	if windows == nil {
		windows = []wire.Window{}
	}
	var errs []error
	errs = append(errs,
		writeJSON("windows.json", windows),
		writeNDJSON("late.ndjson", len(r.Late), func(i int) any { return r.Late[i] }),
		writeNDJSON("rejected.ndjson", len(r.Rejected), func(i int) any { return r.Rejected[i] }),
		writeNDJSON("trace.ndjson", len(r.Trace), func(i int) any { return r.Trace[i] }),
		writeJSON("metrics.json", map[string]any{"samples": r.Metrics, "crashes": r.Crashes, "ingest": r.Ingest, "elapsed_seconds": r.Elapsed.Seconds()}),
		dashboard.WriteChartFile(dir, r.Metrics),
	)
	pj, err := os.Create(filepath.Join(dir, "parity.json"))
	if err == nil {
		errs = append(errs, r.Report.WriteJSON(pj), pj.Close())
	} else {
		errs = append(errs, err)
	}
	pm, err := os.Create(filepath.Join(dir, "parity.md"))
	if err == nil {
		errs = append(errs, r.Report.WriteMarkdown(pm), pm.Close())
	} else {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
