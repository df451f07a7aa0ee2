package main

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/receiptflow/receiptflow/pkg/dashboard"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// board is a set of windows and a health report, rendered as a table.
type board struct {
	windows map[string]wire.Window
	health  *wire.Health
	zone    *localView // with a zone, a LOCAL column after WINDOW
}

// render writes the table of the newest limit windows.
func (b *board) render(w io.Writer, limit int) {
	ids := make([]string, 0, len(b.windows))
	for id := range b.windows {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	if limit > 0 && len(ids) > limit {
		ids = ids[len(ids)-limit:]
	}
	stale := b.health != nil && b.health.Stale
	fmt.Fprintf(w, "\n== receiptflow windows at %s", time.Now().UTC().Format("15:04:05Z"))
	if b.health != nil {
		fmt.Fprintf(w, "  global watermark %s", b.health.GlobalWatermark.UTC().Format(dashboard.TimeLayout))
	}
	fmt.Fprintln(w)
	if stale {
		fmt.Fprintf(w, "!! STALE: the source has sent nothing since %s (stale after %s); provisional counts may be incomplete\n",
			b.health.SourceLastSeen.UTC().Format(dashboard.TimeLayout), b.health.StaleAfter)
	}
	local := func(label string) string {
		if b.zone == nil {
			return ""
		}
		return fmt.Sprintf(" %-29s", label)
	}
	fmt.Fprintf(w, "%-14s%s %7s %7s %-9s %6s %6s %-20s %s\n", "WINDOW", local("LOCAL"), "COUNT", "VERSION", "STATUS", "CORR", "LATE", "WATERMARK", "NOTE")
	for _, id := range ids {
		s := b.windows[id]
		var note []string
		if s.Status == "final" {
			note = append(note, "final")
		} else {
			note = append(note, "provisional")
		}
		if s.Corrections > 0 {
			note = append(note, fmt.Sprintf("corrected +%d", s.Corrections))
		}
		if s.Stale {
			note = append(note, "STALE")
		}
		label := ""
		if b.zone != nil {
			label = b.zone.label(s.Start)
		}
		fmt.Fprintf(w, "%-14s%s %7d %7d %-9s %6d %6d %-20s %s\n", s.WindowID, local(label), s.Count, s.Version, s.Status,
			s.Corrections, s.LateDropped, s.Watermark.UTC().Format(dashboard.TimeLayout), strings.Join(note, ", "))
	}
}

// writeAligned writes a table of cells under header, each column as wide as its widest cell: numbers right-aligned, text
// left-aligned, like the board's table.
func writeAligned(w io.Writer, header []string, cells [][]string) error {
	width := make([]int, len(header))
	numeric := make([]bool, len(header))
	for c, h := range header {
		width[c] = len(h)
		numeric[c] = len(cells) > 0
	}
	for _, row := range cells {
		for c, v := range row {
			width[c] = max(width[c], len(v))
			if _, err := strconv.ParseInt(v, 10, 64); err != nil {
				numeric[c] = false
			}
		}
	}
	line := func(row []string) error {
		var b strings.Builder
		for c, v := range row {
			if c > 0 {
				b.WriteByte(' ')
			}
			pad := strings.Repeat(" ", width[c]-len(v))
			if numeric[c] {
				b.WriteString(pad + v)
			} else if c < len(row)-1 {
				b.WriteString(v + pad)
			} else {
				b.WriteString(v)
			}
		}
		b.WriteByte('\n')
		_, err := io.WriteString(w, b.String())
		return err
	}
	if err := line(header); err != nil {
		return err
	}
	for _, row := range cells {
		if err := line(row); err != nil {
			return err
		}
	}
	return nil
}
