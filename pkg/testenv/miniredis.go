package testenv

import (
	"testing"

	"github.com/alicebob/miniredis/v2"
)

// Miniredis starts a miniredis on 127.0.0.1 and a free port, closed by
// t.Cleanup. Clients reach it at m.Addr(). It fails the test if the server
// does not start. Each call gives a separate, empty server.
func Miniredis(t testing.TB) *miniredis.Miniredis {
	t.Helper()
	return miniredis.RunT(t)
}
