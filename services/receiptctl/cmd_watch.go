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
// table, redrawn in place on a terminal (appended when piped, and only
// when something changed), with final, provisional, corrected and stale
// windows marked. It follows the active-generation pointer and survives
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
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case *natsURL == "":
		return usageError("--nats-url (or NATS_URL) is required: watch follows a running deployment")
	case *staleAfter <= 0 || *every <= 0 || *rows < 1:
		return usageError("--stale-after and --every must be positive, --rows at least 1")
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

	tty := isTerminal(stdout)
	t := time.NewTicker(*every)
	defer t.Stop()
	var last string
	waited := time.Now()
	for {
		v := svc.View(*rows)
		switch {
		case *once && v.Loaded:
			writeWatch(stdout, v, *rows)
			return nil
		case *once && time.Since(waited) > 15*time.Second:
			return errors.New("the bucket was not loaded within 15s")
		case *once:
		case !v.Loaded && time.Since(waited) < 3*time.Second:
			// Give the first load a moment rather than print an empty table.
		case tty:
			var buf bytes.Buffer
			buf.WriteString("\x1b[H\x1b[2J") // home, clear screen: redraw in place
			writeWatch(&buf, v, *rows)
			stdout.Write(buf.Bytes())
		default:
			if k := watchKey(v); k != last {
				last = k
				writeWatch(stdout, v, *rows)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// writeWatch renders v with the demo's board table plus a status line.
func writeWatch(w io.Writer, v dashboard.View, rows int) {
	b := &board{windows: map[string]wire.Window{}}
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
	b.render(w, rows, true)
	var status []string
	status = append(status, "generation "+v.Generation)
	if v.Connected {
		status = append(status, "NATS connected")
	} else {
		status = append(status, "NATS DISCONNECTED")
	}
	if v.Stale {
		status = append(status, "STALE: "+v.StaleReason)
	}
	if v.Watch.Reloads > 0 {
		status = append(status, fmt.Sprintf("re-watched %d× (last: %s)", v.Watch.Reloads, v.Watch.LastReason))
	}
	if hot := hottest(v.Health); hot != "" {
		status = append(status, "hottest "+hot)
	}
	fmt.Fprintf(w, "-- %s; %d windows in all\n", strings.Join(status, " · "), v.TotalWindows)
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

// watchKey identifies what a piped watch has printed, so it prints again
// only when a window, the staleness or the connection changed.
func watchKey(v dashboard.View) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s|%t|%t|%s|", v.Generation, v.Connected, v.Stale, v.StaleReason)
	for _, w := range v.Windows {
		fmt.Fprintf(&sb, "%s:%d:%s:%t;", w.WindowID, w.Version, w.Status, w.Stale)
	}
	return sb.String()
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
