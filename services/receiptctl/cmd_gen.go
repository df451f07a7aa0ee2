package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/receiptflow/receiptflow/pkg/traffic"
)

// cmdGen writes deterministic synthetic traffic (docs/spec.md §6, gen): the
// same flags always give the same bytes. Records go to --out or stdout; a
// summary of what was written goes to stderr.
func cmdGen(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	d := traffic.DefaultConfig()
	fs := flag.NewFlagSet("gen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	seed := fs.Uint64("seed", d.Seed, "seed; the same flags give byte-identical output")
	events := fs.Int("events", d.Events, "number of records to write, of every kind")
	start := fs.String("start", d.Start.Format(time.RFC3339), "event time of the first event (RFC 3339)")
	hours := fs.Int("hours", d.Hours, "event-time span in hours")
	stores := fs.Int("stores", d.Stores, "distinct partition keys store-0 … store-N-1")
	hot := fs.Float64("hot-share", d.HotShare, "share of events from store-0 (skew)")
	dup := fs.Float64("dup-rate", d.DupRate, "share of records that are byte-identical retries")
	disorder := fs.Float64("disorder-rate", d.DisorderRate, "share of events jittered back by less than the lateness")
	late := fs.Float64("late-rate", d.LateRate, "share of late submissions (half within grace, half after)")
	invalid := fs.Float64("invalid-rate", d.InvalidRate, "share of records breaking the contract, cycling through the reasons")
	v1 := fs.Float64("v1-share", d.V1Share, "share of events written in schema version 1")
	other := fs.Float64("other-type-share", d.OtherTypeShare, "share of draft_saved/viewed events")
	payload := fs.Int("payload-bytes", d.PayloadBytes, "payload size per record (the default makes a record about 400 bytes)")
	out := fs.String("out", "", "output file (default stdout)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError("unexpected arguments %q", fs.Args())
	}
	t0, err := time.Parse(time.RFC3339, *start)
	if err != nil {
		return usageError("--start: %v", err)
	}
	o := traffic.Config{
		Seed: *seed, Events: *events, Start: t0, Hours: *hours, Stores: *stores, HotShare: *hot,
		DupRate: *dup, DisorderRate: *disorder, LateRate: *late, InvalidRate: *invalid,
		V1Share: *v1, OtherTypeShare: *other, PayloadBytes: *payload,
	}
	if *events <= 0 || *hours <= 0 || *stores <= 0 {
		return usageError("--events, --hours and --stores must be positive")
	}

	var st traffic.Stats
	if *out == "" || *out == "-" {
		st, err = traffic.Write(ctxWriter{ctx, stdout}, o)
	} else {
		st, err = writeFileAtomic(*out, func(w io.Writer) (traffic.Stats, error) {
			return traffic.Write(ctxWriter{ctx, w}, o)
		})
	}
	if err != nil {
		return err
	}
	where := "stdout"
	if *out != "" && *out != "-" {
		where = *out
	}
	fmt.Fprintf(stderr, "gen: %d records (%d bytes) to %s: %d submissions, %d other events, %d retries, "+
		"%d disordered, %d late within grace, %d late after grace, %d invalid%s; event time %s … %s\n",
		st.Records, st.Bytes, where, st.Submissions, st.Other, st.Duplicates, st.Disordered,
		st.LateWithinGrace, st.LateAfterGrace, st.InvalidTotal(), byReason(st.Invalid),
		st.FirstEvent.Format(time.RFC3339), st.MaxEvent.Format(time.RFC3339))
	return nil
}

// writeFileAtomic writes path through a temporary file in the same
// directory and renames it into place only when write succeeded.
func writeFileAtomic[T any](path string, write func(io.Writer) (T, error)) (T, error) {
	var zero T
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return zero, err
	}
	v, err := write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return zero, err
	}
	return v, nil
}

// ctxWriter fails writes once ctx is done, so an interrupt stops a long
// write.
type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

func (c ctxWriter) Write(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.w.Write(p)
}
