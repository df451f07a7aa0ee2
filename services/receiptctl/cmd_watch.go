package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/dashboard"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// cmdWatch follows the KV bucket in a terminal: the dashboard's view as a
// table redrawn in place on a terminal, or plain lines (one per change of
// a window or of the status) when the output is not a terminal, with
// final, provisional, corrected and stale windows marked. It follows the active-generation pointer and survives
// nats-server restarts as the dashboard does.
func cmdWatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("watch", flag.ContinueOnError)
	fs.SetOutput(stderr)
	natsURL := fs.String("nats-url", os.Getenv("NATS_URL"), "NATS server URL of the deployment to watch (env NATS_URL)")
	gen := fs.String("generation", "", "generation to show (default: follow the active-generation pointer)")
	staleAfter := fs.Duration("stale-after", 2*time.Minute, "silence of the source (or the publisher) after which the data is shown as stale")
	rows := fs.Int("rows", 24, "table rows (most recent windows)")
	every := fs.Duration("every", time.Second, "redraw period")
	once := fs.Bool("once", false, "print the table once the bucket is loaded, then exit")
	tzName := fs.String("time-zone", "UTC", "IANA time zone (Europe/Berlin): given, each window gets its local start and the local days shown are summed")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var zone *localView
	if flagGiven(fs, "time-zone") {
		z, err := newLocalView(*tzName, time.Now())
		if err != nil {
			return err
		}
		zone = z
	}
	switch {
	case *natsURL == "":
		return usageError("--nats-url (or NATS_URL) is required: watch follows a running deployment")
	case *staleAfter <= 0 || *every <= 0 || *rows < 1:
		return usageError("--stale-after and --every must be positive, --rows at least 1")
	}
	if err := connect.CheckNATSURL(*natsURL); err != nil {
		return usageError("--nats-url %v", err)
	}
	conn, err := connect.ConnectNATS(*natsURL, "receiptflow-watch")
	if err != nil {
		return err
	}
	defer conn.Close()
	svc, err := dashboard.New(conn.NC, dashboard.Config{Generation: *gen, StaleAfter: *staleAfter, Recent: *rows})
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(runCtx) }()
	defer func() { stop(); <-done }()

	scr := newScreen(stdout, isTerminal(stdout), "", *rows)
	scr.zone = zone
	t := time.NewTicker(*every)
	defer t.Stop()
	waited := time.Now()
	for {
		v := svc.View(*rows)
		if zone != nil {
			if err := zone.update(svc.View(0)); err != nil {
				return err
			}
		}
		switch {
		case *once && v.Loaded:
			writeWatch(stdout, v, *rows, zone)
			return nil
		case *once && time.Since(waited) > 15*time.Second:
			return errors.New("the bucket was not loaded within 15s")
		case *once:
		case !v.Loaded && time.Since(waited) < 3*time.Second:
			// Give the first load a moment rather than print an empty table.
		default:
			scr.show(v)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// writeWatch renders v with the demo's board table plus a status line.
// With a zone, windows carry their local start and their local days follow.
func writeWatch(w io.Writer, v dashboard.View, rows int, zone *localView) {
	b := &board{windows: map[string]wire.Window{}, zone: zone}
	for _, wv := range v.Windows {
		b.windows[wv.WindowID] = wire.Window{
			WindowID: wv.WindowID, Start: wv.Start, End: wv.End, Count: wv.Count, Version: wv.Version,
			Status: wv.Status, Watermark: wv.Watermark, UpdatedAt: wv.UpdatedAt,
			FirstOutputVersion: wv.FirstOutputVersion, Corrections: wv.Corrections, LateDropped: wv.LateDropped,
			Stale: wv.Stale, // the reader's verdict, not only the published flag
		}
	}
	if v.Health != nil {
		h := *v.Health
		h.Stale = v.Stale
		b.health = &h
	}
	b.render(w, rows)
	zone.writeDays(w, v)
	status := statusParts(v)
	if hot := hottest(v.Health); hot != "" {
		status = append(status, "hottest "+hot)
	}
	fmt.Fprintf(w, "-- %s; %s in all\n", strings.Join(status, " · "), plural(v.TotalWindows, "window", ""))
}

// startingNote is the status of a reader waiting for the publisher's
// first health report (a fresh deployment; stale only after --stale-after).
const startingNote = "starting: waiting for the publisher's first health report"

// statusParts is the status of v that does not move with every event:
// generation, connection, staleness and re-watches.
func statusParts(v dashboard.View) []string {
	status := []string{"generation " + v.Generation}
	if v.Connected {
		status = append(status, "NATS connected")
	} else {
		status = append(status, "NATS DISCONNECTED")
	}
	if v.Stale {
		status = append(status, "STALE: "+v.StaleReason)
	}
	if v.Starting {
		status = append(status, startingNote)
	}
	if h := v.Health; h != nil && h.WatermarkAheadMs > 0 {
		status = append(status, fmt.Sprintf("WATERMARK AHEAD OF CLOCK by %s (partitions %v)",
			(time.Duration(h.WatermarkAheadMs)*time.Millisecond).Round(time.Second), h.AheadPartitions))
	}
	if v.Watch.Reloads > 0 {
		status = append(status, fmt.Sprintf("re-watched %d× (last: %s)", v.Watch.Reloads, v.Watch.LastReason))
	}
	return status
}

// screen shows a live view: on a terminal it redraws in place, the banner
// kept at the top; elsewhere (a pipe, a file, a log collector) it writes
// plain lines, one per change of a window or of the status, so that the
// output can be read and grepped.
type screen struct {
	w       io.Writer
	tty     bool
	banner  string
	rows    int
	notice  string            // the last notice (tty: shown under the banner)
	status  string            // plain: the status last written
	printed map[string]string // plain: each window's line last written
	zone    *localView        // --time-zone, nil for UTC ids only
}

func newScreen(w io.Writer, tty bool, banner string, rows int) *screen {
	return &screen{w: w, tty: tty, banner: banner, rows: rows, printed: map[string]string{}}
}

// show writes v: the whole screen on a terminal, the changes elsewhere.
func (s *screen) show(v dashboard.View) {
	if s.tty {
		var buf bytes.Buffer
		buf.WriteString("\x1b[H\x1b[2J") // home, clear screen: redraw in place
		buf.WriteString(s.banner)
		if s.notice != "" {
			fmt.Fprintf(&buf, "%s\n", s.notice)
		}
		writeWatch(&buf, v, s.rows, s.zone)
		s.w.Write(buf.Bytes())
		return
	}
	now := time.Now().UTC().Format("15:04:05Z")
	if st := strings.Join(statusParts(v), " · "); st != s.status {
		s.status = st
		fmt.Fprintf(s.w, "%s status: %s\n", now, st)
	}
	// Oldest first, as they happened.
	for i := len(v.Windows) - 1; i >= 0; i-- {
		wv := v.Windows[i]
		if line := s.zone.zonedLine(wv, windowLine(wv)); s.printed[wv.WindowID] != line {
			s.printed[wv.WindowID] = line
			fmt.Fprintf(s.w, "%s %s\n", now, line)
		}
	}
	if s.zone != nil {
		for _, d := range s.zone.shown(v) {
			if line := dayLine(d); s.printed["day "+d.Day] != line {
				s.printed["day "+d.Day] = line
				fmt.Fprintf(s.w, "%s %s\n", now, line)
			}
		}
	}
}

// note shows a notice (a demo feed case): under the banner on a terminal,
// a line elsewhere.
func (s *screen) note(msg string) {
	s.notice = msg
	if !s.tty {
		fmt.Fprintf(s.w, "%s %s\n", time.Now().UTC().Format("15:04:05Z"), msg)
	}
}

// windowLine is a window as one plain line.
func windowLine(w dashboard.WindowView) string {
	state := string(w.Status) + " provisional"
	if w.Status == "final" {
		state = "final"
	}
	line := fmt.Sprintf("window %s count %d version %d %s", w.WindowID, w.Count, w.Version, state)
	if w.Corrections > 0 {
		line += fmt.Sprintf(", corrected +%d", w.Corrections)
	}
	if w.LateDropped > 0 {
		line += fmt.Sprintf(", %d late dropped", w.LateDropped) // "late dropped": an adjective, no plural
	}
	if w.Stale {
		line += ", STALE"
	}
	return line
}

func hottest(h *wire.Health) string {
	if h == nil {
		return ""
	}
	var parts []string
	for _, p := range h.Hottest {
		parts = append(parts, fmt.Sprintf("p%d %d/min", p.Partition, p.Recent))
	}
	return strings.Join(parts, ", ")
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
