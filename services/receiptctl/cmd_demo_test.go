package main

import (
	"strings"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/demo"
)

// TestDemoFeedLinesSayWhatTheySent: each "feed:" line names the case and
// says what it sent and what the pipeline does with it. Before, the lines
// were bare names (feed: malformed_json) that no document explained.
func TestDemoFeedLinesSayWhatTheySent(t *testing.T) {
	for _, name := range append(append([]string(nil), demo.Cases...), "idle") {
		line := feedLine(name, 20*time.Second, 15*time.Second)
		what := demo.What(name)
		if what == "" || !strings.HasPrefix(line, "feed: "+name) || !strings.HasSuffix(line, " — "+what) {
			t.Errorf("case %s: line %q, explanation %q", name, line, what)
		}
	}
}
