package main

import (
	"os"
	"strings"
	"testing"

	"github.com/receiptflow/receiptflow/pkg/testenv"
)

func TestMain(m *testing.M) {
	testenv.RunMainIfChild(main)
	os.Exit(m.Run())
}

func TestFlags(t *testing.T) { testenv.CheckServiceFlags(t, "publisher") }

func TestServesAndStopsOnSIGTERM(t *testing.T) { testenv.CheckServiceLifecycle(t, "publisher") }

// TestWindowRetentionTooShortRefused: the publisher refuses, before it
// connects, a window retention shorter than grace + replay horizon (a
// window cannot be pruned before its state is retired), naming the flag;
// like every bad flag value of a service process, it exits 1.
func TestWindowRetentionTooShortRefused(t *testing.T) {
	code, out := testenv.RunMain(t, "--window-retention", "12h", "--grace", "1h", "--replay-horizon", "24h")
	if code != 1 || !strings.Contains(out, "--window-retention 12h0m0s must be at least --grace + --replay-horizon (25h0m0s)") {
		t.Fatalf("exit %d, output:\n%s", code, out)
	}
}
