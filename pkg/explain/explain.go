package explain

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/receiptflow/receiptflow/pkg/reconcile"
	"github.com/receiptflow/receiptflow/pkg/window"
)

var (
	// ErrUnknownWindow: the window is not in the records (never seen, or
	// pruned); the error names it.
	ErrUnknownWindow = errors.New("unknown window")
	// ErrInconsistent: the records disagree (Count != OnTime +
	// len(Corrections), or the corrections do not match the snapshot's).
	ErrInconsistent = errors.New("the records disagree")
)

// Explanation is the answer for one window (the JSON of receiptctl explain
// --format json, docs/spec.md §6).
type Explanation struct {
	WindowID string        `json:"window_id"`
	Status   window.Status `json:"status"`
	Version  int64         `json:"version"`
	Count    int64         `json:"count"`
	// OnTime counts the events counted before the window's watermark passed
	// its end.
	OnTime int64 `json:"on_time"`
	// Corrections are the events counted in grace, in the order counted
	// within each partition.
	Corrections []Correction `json:"corrections"`
	// Late are the events routed to LATE for this window.
	Late []Late `json:"late"`
	// Duplicates is how many copies of the window's events were dropped as
	// duplicates by the pipeline's ledger.
	Duplicates int64 `json:"duplicates"`
	// Conflicts are the window's event ids of which a copy with other
	// content was rejected conflicting_duplicate.
	Conflicts []string `json:"conflicts"`
	// ConflictsUnknown: REJECTED holds conflicting rows that name no
	// window (from before wire.HdrWindow), and the window's ledger, the
	// only other check, is retired in a partition: Conflicts may miss some.
	ConflictsUnknown bool   `json:"conflicts_unknown,omitempty"`
	Digest           string `json:"digest"`
	// Parity is the referee's verdict on the window, when a parity report
	// was read and it judged the window (final windows only).
	Parity *Parity `json:"parity,omitempty"`
	// IngestDuplicates is how many retries of the window's events the
	// broker's duplicate window dropped at ingest: known only from a run's
	// trace (absent for a live deployment).
	IngestDuplicates int64 `json:"ingest_duplicates,omitempty"`
}

// Correction is one event counted in grace.
type Correction struct {
	EventID string `json:"event_id"`
	// Version is the version of the window's partial in Partition after
	// the event was counted (see the package doc).
	Version   int64 `json:"version"`
	Partition int   `json:"partition"`
}

// Late is one event routed to LATE.
type Late struct {
	EventID   string    `json:"event_id"`
	Reason    string    `json:"reason"`
	Watermark time.Time `json:"watermark"`
	// Source is the id of the source that sent the event (docs/spec.md
	// §3.1; "" for RAW written before sources had ids).
	Source string `json:"source"`
}

// Parity is the referee's verdict on one window.
type Parity struct {
	// Verdict is match, explained or mismatch.
	Verdict string `json:"verdict"`
	// EventIDs are the event ids the verdict's differences name.
	EventIDs []string `json:"event_ids"`
}

// Verdicts of Parity.
const (
	VerdictMatch     = "match"
	VerdictExplained = "explained"
	VerdictMismatch  = "mismatch"
)

// unknown is ErrUnknownWindow naming id and where it was looked for.
func unknown(id, where string) error {
	return fmt.Errorf("%w %s: %s", ErrUnknownWindow, id, where)
}

// check holds e to the invariant of the package doc; snapCorrections is
// the snapshot's corrections.
func (e *Explanation) check(snapCorrections int64) error {
	if e.Count != e.OnTime+int64(len(e.Corrections)) {
		return fmt.Errorf("window %s: %w: count %d != on_time %d + corrections %d",
			e.WindowID, ErrInconsistent, e.Count, e.OnTime, len(e.Corrections))
	}
	if int64(len(e.Corrections)) != snapCorrections {
		return fmt.Errorf("window %s: %w: %d corrections recorded, the snapshot says %d",
			e.WindowID, ErrInconsistent, len(e.Corrections), snapCorrections)
	}
	return nil
}

// normalize makes the lists non-nil and ordered the same way from every
// source: corrections by partition then version, late and conflicts by
// event id.
func (e *Explanation) normalize() {
	if e.Corrections == nil {
		e.Corrections = []Correction{}
	}
	if e.Late == nil {
		e.Late = []Late{}
	}
	if e.Conflicts == nil {
		e.Conflicts = []string{}
	}
	sort.Slice(e.Corrections, func(i, j int) bool {
		a, b := e.Corrections[i], e.Corrections[j]
		if a.Partition != b.Partition {
			return a.Partition < b.Partition
		}
		return a.Version < b.Version
	})
	sort.Slice(e.Late, func(i, j int) bool { return e.Late[i].EventID < e.Late[j].EventID })
	sort.Strings(e.Conflicts)
}

// ParityOf is the verdict of report on window id: nil when the report did
// not judge it (not final, or absent).
func ParityOf(report *reconcile.Report, id string) *Parity {
	if report == nil {
		return nil
	}
	for _, wr := range report.Windows {
		if wr.WindowID != id {
			continue
		}
		p := &Parity{EventIDs: []string{}}
		switch wr.Verdict {
		case reconcile.VerdictMatch:
			p.Verdict = VerdictMatch
		case reconcile.VerdictExplained:
			p.Verdict = VerdictExplained
		case reconcile.VerdictUnexplained:
			p.Verdict = VerdictMismatch
		default:
			return nil
		}
		seen := map[string]bool{}
		for _, d := range wr.Differences {
			if d.EventID != "" && !seen[d.EventID] {
				seen[d.EventID] = true
				p.EventIDs = append(p.EventIDs, d.EventID)
			}
		}
		return p
	}
	return nil
}
