package embedded

import (
	"fmt"

	"github.com/alicebob/miniredis/v2"
)

// StartRedis starts an in-process miniredis on 127.0.0.1 and a free port; it
// is the embedded default Redis. Clients reach it at "redis://" + m.Addr().
// The caller stops it with Close. It returns an error if no port could be
// bound. Every call starts a separate, empty server; it is safe to call
// concurrently. miniredis keeps everything in memory and runs Lua scripts
// through gopher-lua, so it is for the embedded default and tests, not for
// durability.
func StartRedis() (*miniredis.Miniredis, error) {
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("embedded: start miniredis: %w", err)
	}
	return m, nil
}
