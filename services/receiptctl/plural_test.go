package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/receiptflow/receiptflow/pkg/dashboard"
)

// TestCountsNameTheirNounInTheRightNumber (issue 26): a count of one is
// followed by the singular ("1 window in all", not "1 windows in all").
func TestCountsNameTheirNounInTheRightNumber(t *testing.T) {
	for _, c := range []struct {
		n    int
		want string
	}{{0, "0 windows"}, {1, "1 window"}, {2, "2 windows"}} {
		if got := plural(c.n, "window", ""); got != c.want {
			t.Errorf("plural(%d) = %q, want %q", c.n, got, c.want)
		}
	}
	if got := plural(int64(1), "entry", "entries"); got != "1 entry" {
		t.Errorf("got %q", got)
	}
	var b bytes.Buffer
	writeWatch(&b, dashboard.View{Generation: "1", Connected: true, Loaded: true, TotalWindows: 1,
		Windows: []dashboard.WindowView{{WindowID: "2026-12-04T03", Count: 1, Version: 1, Status: "open"}}}, 5, nil)
	if !strings.Contains(b.String(), "; 1 window in all") {
		t.Errorf("watch status line: %q, want \"1 window in all\"", b.String())
	}
}
