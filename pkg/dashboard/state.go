package dashboard

import (
	"encoding/json"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/wire"
)

// contents is what one bucket holds that the dashboard shows.
type contents struct {
	windows map[string]wire.Window
	health  *wire.Health
	// days are the day rollups by day id, for the local days of hours
	// whose snapshots were pruned (days.go).
	days map[string]wire.Day
}

func newContents() *contents {
	return &contents{windows: map[string]wire.Window{}, days: map[string]wire.Day{}}
}

// apply records one KV entry. It reports whether the entry mattered and,
// for a window, the snapshot stored.
func (c *contents) apply(e jetstream.KeyValueEntry) (changed bool, w *wire.Window, err error) {
	key := e.Key()
	deleted := e.Operation() == jetstream.KeyValueDelete || e.Operation() == jetstream.KeyValuePurge
	switch {
	case strings.HasPrefix(key, wire.WindowKey("")):
		id := strings.TrimPrefix(key, wire.WindowKey(""))
		if deleted {
			_, had := c.windows[id]
			delete(c.windows, id)
			return had, nil, nil
		}
		var s wire.Window
		if err := json.Unmarshal(e.Value(), &s); err != nil {
			return false, nil, err
		}
		if s.WindowID == "" {
			s.WindowID = id
		}
		if cur, ok := c.windows[id]; ok && cur.Version > s.Version {
			return false, nil, nil // never move a window backwards
		}
		c.windows[id] = s
		return true, &s, nil
	case strings.HasPrefix(key, wire.DayKeyPrefix):
		// Kept for /api/days only: nothing the pushed view shows changed.
		id := strings.TrimPrefix(key, wire.DayKeyPrefix)
		if deleted {
			delete(c.days, id)
			return false, nil, nil
		}
		var d wire.Day
		if err := json.Unmarshal(e.Value(), &d); err != nil {
			return false, nil, err
		}
		c.days[id] = d
		return false, nil, nil
	case key == wire.HealthKey:
		if deleted {
			c.health = nil
			return true, nil, nil
		}
		var h wire.Health
		if err := json.Unmarshal(e.Value(), &h); err != nil {
			return false, nil, err
		}
		c.health = &h
		return true, nil, nil
	}
	return false, nil, nil
}

// state is what the dashboard currently shows. Safe for concurrent use.
type state struct {
	mu         sync.Mutex
	generation string
	cur        *contents
	loaded     bool
	// firstCount is each window's count at its first hourly output, when
	// the dashboard saw that revision (the bucket keeps no history).
	firstCount map[string]int64
	connected  bool
	quiet      int64
	reloads    int64
	lastReason string
	lastReload time.Time
	lastUpdate time.Time
}

func newState() *state {
	return &state{cur: newContents(), firstCount: map[string]int64{}}
}

// noteFirst remembers the count of a window's first output revision.
func (st *state) noteFirst(w *wire.Window) {
	if w != nil && w.FirstOutputVersion > 0 && w.Version == w.FirstOutputVersion {
		st.firstCount[w.WindowID] = w.Count
	}
}

// replace swaps in a freshly loaded bucket of generation gen.
func (st *state) replace(gen string, c *contents, now time.Time) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if gen != st.generation {
		st.firstCount = map[string]int64{}
	}
	for _, w := range c.windows {
		st.noteFirst(&w)
	}
	st.generation, st.cur, st.loaded, st.lastUpdate = gen, c, true, now
}

// apply records a live update; it reports whether anything changed.
func (st *state) apply(e jetstream.KeyValueEntry, now time.Time) (bool, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.lastUpdate = now
	changed, w, err := st.cur.apply(e)
	st.noteFirst(w)
	return changed, err
}

func (st *state) setConnected(c bool) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	was := st.connected
	st.connected = c
	return was != c
}

// noteQuiet counts a silence after which the watch was found current.
func (st *state) noteQuiet() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.quiet++
}

func (st *state) noteReload(reason string, now time.Time) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.reloads++
	st.lastReason, st.lastReload = reason, now
}

// target returns the generation shown ("" before the first load) and its
// partition count from the publisher's report (0: unknown).
func (st *state) target() (string, int) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.loaded {
		return "", 0
	}
	n := 0
	if st.cur.health != nil {
		n = len(st.cur.health.Watermarks)
	}
	return st.generation, n
}
