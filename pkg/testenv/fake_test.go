package testenv

import (
	"fmt"
	"testing"
)

// recorder is a testing.TB that records Fatalf and Skipf instead of ending
// the test, to test the helpers' failure paths.
type recorder struct {
	testing.TB
	fatal, skip string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
}

func (r *recorder) Skipf(format string, args ...any) {
	r.skip = fmt.Sprintf(format, args...)
}
