package testenv

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestCheckForSucceedsOnceTrue(t *testing.T) {
	calls := 0
	CheckFor(t, 5*time.Second, time.Millisecond, func() error {
		calls++
		if calls < 3 {
			return fmt.Errorf("call %d", calls)
		}
		return nil
	})
	if calls != 3 {
		t.Fatalf("f called %d times, want 3", calls)
	}
}

func TestCheckForFailsWithLastError(t *testing.T) {
	r := &recorder{TB: t}
	calls := 0
	CheckFor(r, 30*time.Millisecond, 5*time.Millisecond, func() error {
		calls++
		return fmt.Errorf("not yet (%d)", calls)
	})
	if calls < 2 {
		t.Errorf("f called %d times, want it polled", calls)
	}
	if want := fmt.Sprintf("not yet (%d)", calls); !strings.Contains(r.fatal, want) {
		t.Fatalf("Fatalf(%q), want the last error %q", r.fatal, want)
	}
}

func TestCheckForCallsAtLeastOnce(t *testing.T) {
	r := &recorder{TB: t}
	calls := 0
	CheckFor(r, 0, time.Second, func() error { calls++; return errors.New("no") })
	if calls != 1 || r.fatal == "" {
		t.Fatalf("calls=%d fatal=%q; want one call and a failure", calls, r.fatal)
	}
}
