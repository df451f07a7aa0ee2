package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/dashboard"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// TestWatchTimeZone: receiptctl watch --once --time-zone Europe/Berlin
// over the hours around Berlin's Oct 25, 2026 fall-back labels each
// window with its local start (the repeated 02:00 by its offset) and sums
// the 25-hour local day, in grace because one of its hours is.
func TestWatchTimeZone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, url := testenv.NATS(t)
	js := testenv.JetStream(t, url)
	if err := stream.Ensure(ctx, js, wire.For(""), stream.Config{Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, wire.For("").Bucket())
	if err != nil {
		t.Fatal(err)
	}
	// Local Oct 25 is [Oct 24 22:00Z, Oct 25 23:00Z): 25 hours, each with
	// one event; the last in grace, every other final; Oct 26 00:00Z is
	// the next day's first hour, open.
	var want int64
	for s := time.Date(2026, 10, 24, 22, 0, 0, 0, time.UTC); !s.After(time.Date(2026, 10, 25, 23, 0, 0, 0, time.UTC)); s = s.Add(time.Hour) {
		st := window.StatusFinal
		switch {
		case s.Hour() == 23 && s.Day() == 25:
			st = window.StatusOpen
		case s.Hour() == 22 && s.Day() == 25:
			st = window.StatusInGrace
		}
		n := int64(s.Hour() + 1)
		if s.Day() == 24 || s.Hour() < 23 {
			want += n
		}
		id := window.ID(window.Ms(s))
		b, err := json.Marshal(wire.Window{WindowID: id, Start: s, End: s.Add(time.Hour), Count: n, Version: n, Status: st})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, wire.WindowKey(id), b); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := runCLI(t, "watch", "--nats-url", url, "--once", "--rows", "30", "--time-zone", "Europe/Berlin")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	// Columns are padded: compare with runs of spaces as one.
	flat := strings.Join(strings.Fields(out), " ")
	for _, line := range []string{
		"2026-10-25T00 2026-10-25 02:00 CEST (+02:00) 1 1 final",
		"2026-10-25T01 2026-10-25 02:00 CET (+01:00) 2 2 final",
		"2026-10-25T02 2026-10-25 03:00 CET 3 3 final",
		"2026-10-24T22 2026-10-25 00:00 CEST 23 23 final",
		"-- day 2026-10-25 Europe/Berlin (25 hours, 25 with data) count " + itoa(want) + " in_grace,",
		"-- day 2026-10-26 Europe/Berlin (24 hours, 1 with data) count 24 open,",
	} {
		if !strings.Contains(flat, line) {
			t.Errorf("missing %q in:\n%s", line, out)
		}
	}
	if !strings.Contains(flat, "WINDOW LOCAL COUNT") {
		t.Errorf("no LOCAL column:\n%s", out)
	}
	// Without --time-zone the table is as it was: UTC window ids only.
	if _, plain, _ := runCLI(t, "watch", "--nats-url", url, "--once", "--rows", "30"); strings.Contains(plain, "CEST") || strings.Contains(plain, "-- day") {
		t.Errorf("no zone asked, but:\n%s", plain)
	}
}

// TestWatchTimeZoneRefused: watch refuses a half-hour zone and an unknown
// one with exit 2 and one line naming it, before connecting.
func TestWatchTimeZoneRefused(t *testing.T) {
	for _, zone := range []string{"Asia/Kolkata", "Asia/Kathmandu", "Nowhere/Town"} {
		code, out, errOut := runCLI(t, "watch", "--nats-url", "nats://127.0.0.1:1", "--time-zone", zone)
		if code != 2 || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, zone) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q", zone, code, out, errOut)
		}
	}
}

// TestScreenPlainLinesInAZone: off a terminal, each window's line carries
// its local start and each local day shown gets a line of its own, written
// again only when it changes.
func TestScreenPlainLinesInAZone(t *testing.T) {
	z, err := newLocalView("America/New_York", time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	s := newScreen(&b, false, "", 5)
	s.zone = z
	at := time.Date(2026, 11, 1, 6, 0, 0, 0, time.UTC)
	v := dashboard.View{Generation: "1", Connected: true, Loaded: true, Windows: []dashboard.WindowView{
		{WindowID: window.ID(window.Ms(at)), Start: at, End: at.Add(time.Hour), Count: 7, Version: 2, Status: window.StatusOpen}}}
	if err := z.update(v); err != nil {
		t.Fatal(err)
	}
	s.show(v)
	s.show(v)
	out := b.String()
	if !strings.Contains(out, "window 2026-11-01T06 (2026-11-01 01:00 EST (-05:00)) count 7") ||
		strings.Count(out, "day 2026-11-01 America/New_York (25 hours, 1 with data) count 7 open") != 1 {
		t.Fatalf("plain lines:\n%s", out)
	}
}
