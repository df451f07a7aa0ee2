package boundedrun

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestHoldLooksEveryFewLines: the backlog is asked before the first line
// and every holdEvery lines after, and every line goes on to the pace
// after the hold.
func TestHoldLooksEveryFewLines(t *testing.T) {
	const lines = 3*holdEvery + 5
	var asked, paced int
	pace := holdBacklog(func(context.Context) (uint64, error) { asked++; return 0, nil }, 10, time.Second,
		func(context.Context, int) error { paced++; return nil })
	for n := range lines {
		if err := pace(context.Background(), n); err != nil {
			t.Fatal(err)
		}
	}
	if want := 4; asked != want {
		t.Fatalf("backlog asked %d times for %d lines, want %d", asked, lines, want)
	}
	if paced != lines {
		t.Fatalf("the rate's pace had %d lines of %d", paced, lines)
	}
}

// TestHoldWaitsForTheBacklog: no line passes while the backlog is over the
// bound, and the source goes on once it is not.
func TestHoldWaitsForTheBacklog(t *testing.T) {
	backlog := []uint64{500, 400, 300, 100, 0}
	var asked int
	pace := holdBacklog(func(context.Context) (uint64, error) {
		n := backlog[min(asked, len(backlog)-1)]
		asked++
		return n, nil
	}, 100, time.Minute, nil)
	if err := pace(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	if asked != 4 {
		t.Fatalf("the first line went after %d looks at the backlog, want it after the 4th (backlog 100, the bound)", asked)
	}
}

// TestHoldStopsOnAStall: a backlog that does not shrink for the stall
// timeout is an error naming it, and so is the end of ctx.
func TestHoldStopsOnAStall(t *testing.T) {
	pace := holdBacklog(func(context.Context) (uint64, error) { return 300, nil }, 100, 50*time.Millisecond, nil)
	err := pace(context.Background(), 0)
	if err == nil || !strings.Contains(err.Error(), "backlog stays at 300, over 100") {
		t.Fatalf("err = %v, want the stall", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	pace = holdBacklog(func(context.Context) (uint64, error) { cancel(); return 300, nil }, 100, -1, nil)
	if err := pace(ctx, 0); err != context.Canceled {
		t.Fatalf("err = %v after ctx ended, want context.Canceled", err)
	}
}
