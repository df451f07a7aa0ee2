package explain

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// WriteJSON writes e as indented JSON.
func WriteJSON(w io.Writer, e *Explanation) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(e)
}

// WriteText writes e for a person: the sum first, then each list.
func WriteText(w io.Writer, e *Explanation) error {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("window %s: %s, version %d, digest %s\n", e.WindowID, e.Status, e.Version, e.Digest)
	p("count %d = %d on time + %d corrections\n", e.Count, e.OnTime, len(e.Corrections))
	if len(e.Corrections) > 0 {
		p("\ncorrections (counted in grace, after the window's watermark passed its end):\n")
		for _, c := range e.Corrections {
			p("  %-40s partition %d, its version %d\n", c.EventID, c.Partition, c.Version)
		}
	}
	p("\nlate, not counted (%d):\n", len(e.Late))
	for _, l := range e.Late {
		p("  %-40s %s, judged against watermark %s%s\n", l.EventID, l.Reason, l.Watermark.UTC().Format(time.RFC3339), fromSource(l.Source))
	}
	p("\nduplicates dropped: %d", e.Duplicates)
	if e.IngestDuplicates > 0 {
		p(" (and %d retries dropped at ingest by the broker's duplicate window)", e.IngestDuplicates)
	}
	p("\nconflicting copies rejected (conflicting_duplicate): %d", len(e.Conflicts))
	if e.ConflictsUnknown {
		p(" (and maybe more: rejected rows that name no window, from before rows named one, can no longer be checked where the window's ledger is retired)")
	}
	p("\n")
	for _, id := range e.Conflicts {
		p("  %s\n", id)
	}
	switch {
	case e.Parity == nil:
		p("\nparity: no verdict (no parity report, or the window is not final)\n")
	case len(e.Parity.EventIDs) == 0:
		p("\nparity: %s\n", e.Parity.Verdict)
	default:
		p("\nparity: %s (%s)\n", e.Parity.Verdict, strings.Join(e.Parity.EventIDs, ", "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// fromSource names the source of a late event, when it had an id.
func fromSource(id string) string {
	if id == "" {
		return ""
	}
	return ", sent by source " + strconv.Quote(id)
}
