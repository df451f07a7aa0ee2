package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestFormat(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/receiptflow/receiptflow/services", Version: "v1.2.3"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "6e684c1"}, {Key: "vcs.time", Value: "2026-12-05T14:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	if got, want := format("validator", bi, "ignored"), "validator v1.2.3 revision 6e684c1 2026-12-05T14:00:00Z modified, go1.26.8"; got != want {
		t.Errorf("format = %q, want %q", got, want)
	}
	bi = &debug.BuildInfo{GoVersion: "go1.26.8"}
	if got, want := format("dashboard", bi, ""), "dashboard (devel) revision unknown, go1.26.8"; got != want {
		t.Errorf("format = %q, want %q", got, want)
	}
	if got, want := format("dashboard", bi, "abc1234-dirty"), "dashboard (devel) revision abc1234-dirty, go1.26.8"; got != want {
		t.Errorf("format = %q, want %q", got, want)
	}
	if got := String("receiptctl"); !strings.HasPrefix(got, "receiptctl ") || !strings.Contains(got, "go1.") {
		t.Errorf("String = %q", got)
	}
}
