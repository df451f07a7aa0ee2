package config

import (
	"flag"
	"testing"
)

// TestProcsFor: --procs when given, else a GOMAXPROCS variable as Go
// read it, else one thread.
func TestProcsFor(t *testing.T) {
	for _, c := range []struct {
		given bool
		flag  int
		env   string
		want  int
	}{
		{false, 1, "", 1},  // the default
		{false, 1, "4", 0}, // GOMAXPROCS=4 kept
		{true, 2, "4", 2},  // the flag over the variable
		{true, 0, "", 0},   // as Go decides
	} {
		if got := ProcsFor(c.given, c.flag, c.env); got != c.want {
			t.Errorf("ProcsFor(%v, %d, %q) = %d, want %d", c.given, c.flag, c.env, got, c.want)
		}
	}
}

// TestProcsFlag: --procs defaults to one thread and refuses a negative
// count.
func TestProcsFlag(t *testing.T) {
	var p Procs
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	p.Register(fs)
	if err := fs.Parse(nil); err != nil || p.n != 1 || p.Validate() != nil {
		t.Fatalf("default --procs %d (%v, %v), want 1", p.n, err, p.Validate())
	}
	if err := fs.Parse([]string{"--procs", "-1"}); err != nil || p.Validate() == nil {
		t.Fatalf("--procs -1 accepted (%v)", err)
	}
}
