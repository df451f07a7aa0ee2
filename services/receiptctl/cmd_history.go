package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/generation"
	"github.com/receiptflow/receiptflow/pkg/history"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// cmdWindows queries the retained history of a deployment's bucket
// (docs/history.md): the hours (or days) meeting [--from, --to), as a
// table, CSV or JSON. Hours whose snapshot was pruned come from their day
// rollup (source "rollup"). It reads the active generation's bucket, or
// --generation's.
func cmdWindows(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("windows", flag.ContinueOnError)
	fs.SetOutput(stderr)
	natsURL := fs.String("nats-url", os.Getenv("NATS_URL"), "NATS server URL of the deployment (env NATS_URL)")
	var natsSec connect.NATSSecurity
	natsSec.Register(fs)
	gen := fs.String("generation", "", "generation to read (default: the active one)")
	fromFlag := fs.String("from", "", "start of the range, inclusive: a window id (2026-12-02T10), a date (2026-12-02) or an RFC 3339 time")
	toFlag := fs.String("to", "", "end of the range, exclusive, in the same forms (default: no end)")
	format := fs.String("format", "table", "output: table, csv or json")
	by := fs.String("by", "hour", "rows: hour (hourly windows, pruned hours from their day rollup) or day (day rollups; with --time-zone, that zone's local days)")
	tzName := fs.String("time-zone", "UTC", "IANA time zone (Europe/Berlin) to label hours and cut days in; given, hours get a local column, --by day lists local days and a date bound is local midnight")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	zoned := flagGiven(fs, "time-zone")
	loc, err := history.LoadZone(*tzName)
	if err != nil {
		return usageError("--time-zone %v", err)
	}
	if *fromFlag == "" {
		return usageError("--from is required (a window id, a date or an RFC 3339 time)")
	}
	from, err := history.ParseBoundIn(*fromFlag, loc)
	if err != nil {
		return usageError("--from %q: %v", *fromFlag, err)
	}
	to := time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)
	if *toFlag != "" {
		if to, err = history.ParseBoundIn(*toFlag, loc); err != nil {
			return usageError("--to %q: %v", *toFlag, err)
		}
	}
	if from.Before(to) {
		// The whole local days a --by day query reads.
		start, end := history.DaySpan(loc, from, to)
		if err := history.CheckWholeHours(loc, start, end); err != nil {
			return usageError("--time-zone: %v", err)
		}
	}
	switch {
	case !from.Before(to):
		return usageError("--from %s must be before --to %s (the range is [from, to))", *fromFlag, *toFlag)
	case *format != "table" && *format != "csv" && *format != "json":
		return usageError("--format %q: want table, csv or json", *format)
	case *by != "hour" && *by != "day":
		return usageError("--by %q: want hour or day", *by)
	case *natsURL == "":
		return usageError("--nats-url (or NATS_URL) is required: windows reads a running deployment's bucket")
	}
	conn, refusals, err := connectOperator(*natsURL, "receiptctl-windows", natsSec)
	if err != nil {
		return err
	}
	defer conn.Close()
	g := *gen
	if g == "" {
		p, _, err := generation.Active(ctx, conn.JS)
		if err != nil {
			return explainRefusal(err, refusals, natsSec)
		}
		g = p.Generation
	}
	kv, err := conn.JS.KeyValue(ctx, wire.For(g).Bucket())
	if err != nil {
		return explainRefusal(fmt.Errorf("bucket %s: %w", wire.For(g).Bucket(), err), refusals, natsSec)
	}
	readCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	b, err := history.Read(readCtx, kv)
	if err != nil {
		return explainRefusal(err, refusals, natsSec)
	}
	switch {
	case *by == "day" && zoned:
		return writeLocalDays(stdout, *format, b.LocalDays(loc, from, to))
	case *by == "day":
		return writeDays(stdout, *format, b.DaysIn(from, to))
	case zoned:
		return writeLocalHours(stdout, *format, loc, b.Hours(from, to))
	}
	return writeHours(stdout, *format, b.Hours(from, to))
}

// flagGiven reports whether the command line set flag name.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// writeLocalHours writes hours as writeHours does, with their local start
// (history.HourLabel) after the window id.
func writeLocalHours(w io.Writer, format string, loc *time.Location, rows []history.Hour) error {
	header := []string{"window_id", "local", "status", "count", "corrections", "late_dropped", "amount_cents", "unpriced", "version", "stale", "source"}
	cells := make([][]string, len(rows))
	for i := range rows {
		r := &rows[i]
		r.Local = history.HourLabel(loc, r.Start)
		cells[i] = []string{r.WindowID, r.Local, string(r.Status), itoa(r.Count), itoa(r.Corrections), itoa(r.LateDropped),
			itoa(r.AmountCents), itoa(r.Unpriced), itoa(r.Version), strconv.FormatBool(r.Stale), r.Source}
	}
	return writeRows(w, format, rows, header, []string{"WINDOW", "LOCAL", "STATUS", "COUNT", "CORR", "LATE", "AMOUNT_CENTS", "UNPRICED", "VERSION", "STALE", "SOURCE"}, cells)
}

// writeLocalDays writes a zone's local days (history.LocalDays).
func writeLocalDays(w io.Writer, format string, days []history.LocalDay) error {
	header := []string{"day", "label", "hours", "windows", "status", "count", "corrections", "late_dropped", "amount_cents", "unpriced"}
	cells := make([][]string, len(days))
	for i, d := range days {
		cells[i] = []string{d.Day, d.Label, strconv.Itoa(d.Hours), strconv.Itoa(d.Windows), string(d.Status), itoa(d.Count),
			itoa(d.Corrections), itoa(d.LateDropped), itoa(d.AmountCents), itoa(d.Unpriced)}
	}
	return writeRows(w, format, days, header, []string{"DAY", "FIRST_HOUR", "HOURS", "WINDOWS", "STATUS", "COUNT", "CORR", "LATE", "AMOUNT_CENTS", "UNPRICED"}, cells)
}

func writeHours(w io.Writer, format string, rows []history.Hour) error {
	header := []string{"window_id", "status", "count", "corrections", "late_dropped", "amount_cents", "unpriced", "version", "stale", "source"}
	cells := make([][]string, len(rows))
	for i, r := range rows {
		cells[i] = []string{r.WindowID, string(r.Status), itoa(r.Count), itoa(r.Corrections), itoa(r.LateDropped),
			itoa(r.AmountCents), itoa(r.Unpriced), itoa(r.Version), strconv.FormatBool(r.Stale), r.Source}
	}
	return writeRows(w, format, rows, header, []string{"WINDOW", "STATUS", "COUNT", "CORR", "LATE", "AMOUNT_CENTS", "UNPRICED", "VERSION", "STALE", "SOURCE"}, cells)
}

func writeDays(w io.Writer, format string, days []wire.Day) error {
	header := []string{"day", "count", "corrections", "late_dropped", "amount_cents", "unpriced", "windows", "final", "version", "updated_at"}
	cells := make([][]string, len(days))
	for i, d := range days {
		cells[i] = []string{d.Day, itoa(d.Count), itoa(d.Corrections), itoa(d.LateDropped), itoa(d.AmountCents), itoa(d.Unpriced),
			strconv.Itoa(d.Windows), strconv.FormatBool(d.Final), itoa(d.Version), d.UpdatedAt.Format(time.RFC3339)}
	}
	return writeRows(w, format, days, header, []string{"DAY", "COUNT", "CORR", "LATE", "AMOUNT_CENTS", "UNPRICED", "WINDOWS", "FINAL", "VERSION", "UPDATED"}, cells)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// writeRows writes rows as JSON (always an array), or their cells as CSV
// with a header row (the JSON field names), or as a table aligned like
// watch's, under the short column names of watch's table.
func writeRows[T any](w io.Writer, format string, rows []T, header, tableHeader []string, cells [][]string) error {
	switch format {
	case "json":
		if rows == nil {
			rows = []T{}
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	case "csv":
		cw := csv.NewWriter(w)
		if err := cw.Write(header); err != nil {
			return err
		}
		if err := cw.WriteAll(cells); err != nil {
			return err
		}
		return cw.Error()
	case "table":
		return writeAligned(w, tableHeader, cells)
	}
	return errors.New("unknown format " + format)
}
