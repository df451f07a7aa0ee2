package embedded

import (
	"fmt"

	"github.com/alicebob/miniredis/v2"
)

// StartRedis starts a separate, empty miniredis on 127.0.0.1 and a free
// port (clients use "redis://" + m.Addr(); stop it with Close). It errors if
// no port could be bound; safe to call concurrently.
func StartRedis() (*miniredis.Miniredis, error) {
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("embedded: start miniredis: %w", err)
	}
	return m, nil
}
