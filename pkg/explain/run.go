package explain

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/reconcile"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// traceRow is the part of a trace.ndjson line (boundedrun.TraceRow) that
// an explanation reads.
type traceRow struct {
	Partition  int    `json:"partition"`
	EventID    string `json:"event_id"`
	Decision   string `json:"decision"`
	Correction bool   `json:"correction"`
	Layer      string `json:"layer"`
	WindowID   string `json:"window"`
	Version    int64  `json:"version_after"`
}

// FromRun explains window id from the artifacts a bounded run wrote in dir
// (docs/spec.md §6). parity is the parity report to read ("": dir's
// parity.json when there is one; a missing default is no error, a missing
// named file is). It errors with ErrUnknownWindow when windows.json has no
// such window and with ErrInconsistent when the records disagree. It only
// reads files and is safe to call concurrently.
func FromRun(dir, parity, id string) (*Explanation, error) {
	var windows []wire.Window
	if err := readJSON(filepath.Join(dir, "windows.json"), &windows); err != nil {
		return nil, err
	}
	var snap *wire.Window
	for i := range windows {
		if windows[i].WindowID == id {
			snap = &windows[i]
		}
	}
	if snap == nil {
		return nil, unknown(id, fmt.Sprintf("not in %s (%d windows)", filepath.Join(dir, "windows.json"), len(windows)))
	}
	e := &Explanation{WindowID: id, Status: snap.Status, Version: snap.Version, Count: snap.Count, Digest: snap.Digest}

	// The trace: what the windower decided for each message. Counted and
	// late ids of this window, and jetstream-layer retries by event id.
	mine := map[string]bool{}
	ingestDups := map[string]int64{}
	err := readNDJSON(filepath.Join(dir, "trace.ndjson"), func(raw []byte) error {
		var r traceRow
		if err := json.Unmarshal(raw, &r); err != nil {
			return err
		}
		if r.Decision == "duplicate" && r.Layer == "jetstream" {
			ingestDups[r.EventID]++
			return nil
		}
		if r.WindowID != id {
			return nil
		}
		switch r.Decision {
		case "counted":
			mine[r.EventID] = true
			if r.Correction {
				e.Corrections = append(e.Corrections, Correction{EventID: r.EventID, Version: r.Version, Partition: r.Partition})
			} else {
				e.OnTime++
			}
		case "late":
			mine[r.EventID] = true
		case "duplicate":
			e.Duplicates++
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for evt, n := range ingestDups {
		if mine[evt] {
			e.IngestDuplicates += n
		}
	}

	err = readNDJSON(filepath.Join(dir, "late.ndjson"), func(raw []byte) error {
		var r reconcile.LateRow
		if err := json.Unmarshal(raw, &r); err != nil {
			return err
		}
		if r.WindowID == id {
			e.Late = append(e.Late, Late{EventID: r.EventID, Reason: r.Reason, Watermark: r.Watermark, Source: r.Source})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = readNDJSON(filepath.Join(dir, "rejected.ndjson"), func(raw []byte) error {
		var r reconcile.RejectedRow
		if err := json.Unmarshal(raw, &r); err != nil {
			return err
		}
		if r.Reason == contract.ReasonConflictingDuplicate && mine[r.EventID] {
			e.Conflicts = appendNew(e.Conflicts, r.EventID)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}

	named := parity != ""
	if !named {
		parity = filepath.Join(dir, "parity.json")
	}
	var report reconcile.Report
	switch err := readJSON(parity, &report); {
	case err == nil:
		e.Parity = ParityOf(&report, id)
	case !named && errors.Is(err, fs.ErrNotExist):
	default:
		return nil, err
	}
	e.normalize()
	if err := e.check(snap.Corrections); err != nil {
		return nil, err
	}
	return e, nil
}

func appendNew(s []string, v string) []string {
	for _, x := range s {
		if x == v {
			return s
		}
	}
	return append(s, v)
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// readNDJSON calls fn with each non-empty line of path.
func readNDJSON(path string, fn func([]byte) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	r := bufio.NewReader(f)
	for n := 1; ; n++ {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 && !(len(line) == 1 && line[0] == '\n') {
			if ferr := fn(line); ferr != nil {
				return fmt.Errorf("%s line %d: %w", path, n, ferr)
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
}
