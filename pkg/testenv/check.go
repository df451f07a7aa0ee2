package testenv

import (
	"testing"
	"time"
)

// CheckFor calls f until it returns nil, waiting interval between calls, for
// at most total. f is always called at least once. If f has not returned nil
// by then, CheckFor fails the test with f's last error (t.Fatalf, so call it
// from the test's goroutine). Use it to wait for anything asynchronous
// instead of time.Sleep.
func CheckFor(t testing.TB, total, interval time.Duration, f func() error) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(total)
	for calls := 1; ; calls++ {
		err := f()
		if err == nil {
			return
		}
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("CheckFor: still failing after %s (%d calls): %v", time.Since(start).Round(time.Millisecond), calls, err)
			return
		}
		time.Sleep(min(interval, left))
	}
}
