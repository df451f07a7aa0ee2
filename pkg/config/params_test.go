package config

import (
	"errors"
	"flag"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// recorded are parameters other than every default.
var recorded = Params{Partitions: 4, Lateness: 2 * time.Minute, Grace: 30 * time.Minute, HeartbeatEvery: 7,
	MaxFutureSkew: time.Minute, HotKeys: "store-a=3,store-b=2", ReplayHorizon: 3 * time.Hour}

// parse registers the parameter flags (with --heartbeat-every) and parses args.
func parse(t *testing.T, args ...string) (*Params, *flag.FlagSet) {
	t.Helper()
	var p Params
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	p.Register(fs)
	p.RegisterHeartbeat(fs, "")
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return &p, fs
}

// TestAdoptTakesEveryRecordedParameter: with no flag given, every
// parameter is the record's, whatever the defaults are.
func TestAdoptTakesEveryRecordedParameter(t *testing.T) {
	p, fs := parse(t)
	if *p != Defaults() {
		t.Fatalf("no flags, no record: %+v, want the Defaults %+v", *p, Defaults())
	}
	found, err := p.Adopt(recorded.Record("2"), "2", Explicit(fs))
	if err != nil || !found {
		t.Fatalf("Adopt: %v, found %v", err, found)
	}
	if *p != recorded {
		t.Fatalf("adopted %+v, want %+v", *p, recorded)
	}
}

// TestAdoptRefusesADisagreeingFlag: a flag given with another value than
// the record fails naming the parameter and both values; given with the
// same value (in another spelling) it is accepted; an environment
// variable counts as given.
func TestAdoptRefusesADisagreeingFlag(t *testing.T) {
	rec := recorded.Record("1")
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--grace", "2h"}, []string{"--grace 2h0m0s", "30m0s", "generation 1"}},
		{[]string{"--partitions", "8"}, []string{"--partitions 8", "recorded value 4"}},
		{[]string{"--partitions", "4", "--hot-keys", "store-a=2"}, []string{"--hot-keys store-a=2", "store-a=3,store-b=2"}},
		{[]string{"--heartbeat-every", "1000"}, []string{"--heartbeat-every 1000", "value 7"}},
		{[]string{"--replay-horizon", "0s"}, []string{"--replay-horizon 0s", "3h0m0s"}},
	} {
		p, fs := parse(t, tc.args...)
		_, err := p.Adopt(rec, "1", Explicit(fs))
		if !errors.Is(err, ErrDisagrees) {
			t.Errorf("%v: err %v, want ErrDisagrees", tc.args, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: %q does not name %q", tc.args, err, w)
			}
		}
	}
	p, fs := parse(t, "--grace", "30m", "--lateness", "120s", "--hot-keys", "store-b=2,store-a=3")
	if _, err := p.Adopt(rec, "1", Explicit(fs)); err != nil || p.Hot().String() != recorded.HotKeys {
		t.Fatalf("agreeing flags: %v, %+v", err, *p)
	}
	if p.HotKeys = recorded.HotKeys; *p != recorded {
		t.Fatalf("agreeing flags: %+v, want %+v", *p, recorded)
	}
	t.Setenv("RECEIPTS_MAX_FUTURE_SKEW", "5m")
	p, fs = parse(t)
	if _, err := p.Adopt(rec, "1", Explicit(fs)); !errors.Is(err, ErrDisagrees) || !strings.Contains(err.Error(), "--max-future-skew 5m0s") {
		t.Fatalf("RECEIPTS_MAX_FUTURE_SKEW=5m against 1m: %v", err)
	}
}

// TestAdoptWithoutRecord: another generation's record, or none, leaves
// the flags as they are.
func TestAdoptWithoutRecord(t *testing.T) {
	p, fs := parse(t, "--grace", "2h")
	for _, meta := range []map[string]string{nil, recorded.Record("1"), {"_nats.req.level": "2"}} {
		found, err := p.Adopt(meta, "2", Explicit(fs))
		if err != nil || found || p.Grace != 2*time.Hour || p.Partitions != 8 || HasRecord(meta, "2") {
			t.Fatalf("%v: %v, found %v, %+v", meta, err, found, *p)
		}
	}
}

// TestInheritKeepsGivenFlags: a new generation takes the flags given and
// the record of the one it is built from for the others.
func TestInheritKeepsGivenFlags(t *testing.T) {
	p, fs := parse(t, "--grace", "2h")
	if err := p.Inherit(recorded.Record("1"), "1", Explicit(fs)); err != nil {
		t.Fatal(err)
	}
	want := recorded
	want.Grace = 2 * time.Hour
	if *p != want {
		t.Fatalf("inherited %+v, want %+v", *p, want)
	}
}

// TestParamsFileRoundTrip: what WriteParams writes, ReadParams reads as
// the record Adopt takes; a missing file is no record.
func TestParamsFileRoundTrip(t *testing.T) {
	dir := t.TempDir()
	if err := WriteParams(dir, "3", recorded); err != nil {
		t.Fatal(err)
	}
	meta, gen, err := ReadParams(filepath.Join(dir, ParamsFile))
	if err != nil || gen != "3" {
		t.Fatalf("ReadParams: %v, generation %q", err, gen)
	}
	var p Params
	if _, err := p.Adopt(meta, gen, func(string) bool { return false }); err != nil || p != recorded {
		t.Fatalf("read back %+v (%v), want %+v", p, err, recorded)
	}
	if meta, _, err := ReadParams(filepath.Join(dir, "none.json")); meta != nil || err != nil {
		t.Fatalf("missing file: %v, %v", meta, err)
	}
}
