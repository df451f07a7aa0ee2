//go:build race

package contract

// raceEnabled: the race detector changes allocation counts (sync.Pool
// drops items at random), so allocation tests skip under it.
const raceEnabled = true
