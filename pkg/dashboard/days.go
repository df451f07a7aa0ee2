package dashboard

import (
	"net/http"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/receiptflow/receiptflow/pkg/history"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// Local days on the page (docs/spec.md §5.2) are computed here, by
// pkg/history, from what the dashboard follows: the window snapshots and,
// for hours past the window retention, the day rollups' per-hour entries.

const (
	// DefaultDays is how many local days GET /api/days covers by default.
	DefaultDays = 7
	// MaxDays bounds its ?days=.
	MaxDays = 400
)

// DaysView is the body of GET /api/days.
type DaysView struct {
	Zone string `json:"zone"`
	// Days are the local days with data among the Days-long run of local
	// days ending with the day of the newest hour held, newest first.
	Days []history.LocalDay `json:"days"`
	// Older: the bucket holds hours before the oldest day of that run.
	Older bool `json:"older"`
	// Stale is the reader's verdict (View.Stale): a day that is not final
	// may then be incomplete.
	Stale bool   `json:"stale"`
	Error string `json:"error,omitempty"`
}

// serveDays is GET /api/days?tz=NAME&days=N: the local days of zone NAME
// (default UTC) over the last N (default DefaultDays) local days with
// data. An unknown zone, one whose offset is not a whole number of hours
// over those days, or a bad N is a 400 whose error names it.
func (s *Service) serveDays(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	name := q.Get("tz")
	if name == "" {
		name = "UTC"
	}
	n := DefaultDays
	if v := q.Get("days"); v != "" {
		d, err := strconv.Atoi(v)
		if err != nil || d < 1 || d > MaxDays {
			writeJSON(w, http.StatusBadRequest, DaysView{Zone: name, Days: []history.LocalDay{}, Error: "days must be an integer from 1 to " + strconv.Itoa(MaxDays)})
			return
		}
		n = d
	}
	loc, err := history.LoadZone(name)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, DaysView{Zone: name, Days: []history.LocalDay{}, Error: err.Error()})
		return
	}
	b, stale := s.heldHistory()
	v, err := localDays(b, loc, n)
	v.Stale = stale
	if err != nil {
		v.Error = err.Error()
		writeJSON(w, http.StatusBadRequest, v)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// localDays returns the local days of loc with data among the n local
// days ending with the day of b's newest hour, newest first, or
// history.ErrNotWholeHours (naming the zone) for a zone it cannot cut.
func localDays(b *history.Bucket, loc *time.Location, n int) (DaysView, error) {
	v := DaysView{Zone: loc.String(), Days: []history.LocalDay{}}
	all := b.Hours(time.Time{}, time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC))
	if len(all) == 0 {
		return v, nil
	}
	oldest, newest := all[0].Start, all[len(all)-1].Start
	start := history.DayStart(loc, newest)
	for i := 1; i < n; i++ {
		start = history.DayStart(loc, start.Add(-time.Hour))
	}
	if err := history.CheckWholeHours(loc, start.Add(-24*time.Hour), newest.Add(48*time.Hour)); err != nil {
		return v, err
	}
	days := b.LocalDays(loc, start, newest.Add(time.Hour))
	slices.Reverse(days)
	v.Days = append(v.Days, days...)
	v.Older = oldest.Before(start)
	return v, nil
}

// heldHistory returns what the dashboard holds of its bucket's history
// (window snapshots and day rollups, sorted by start) and whether the data
// is stale now. Safe for concurrent use.
func (s *Service) heldHistory() (*history.Bucket, bool) {
	now := s.cfg.Now().UTC()
	st := s.st
	st.mu.Lock()
	defer st.mu.Unlock()
	b := &history.Bucket{Windows: make([]wire.Window, 0, len(st.cur.windows)), Days: make([]wire.Day, 0, len(st.cur.days))}
	for _, w := range st.cur.windows {
		b.Windows = append(b.Windows, w)
	}
	for _, d := range st.cur.days {
		b.Days = append(b.Days, d)
	}
	sort.Slice(b.Windows, func(i, j int) bool { return b.Windows[i].Start.Before(b.Windows[j].Start) })
	sort.Slice(b.Days, func(i, j int) bool { return b.Days[i].Start.Before(b.Days[j].Start) })
	stale, _ := judgeStale(st.cur.health, now, s.started, s.cfg.StaleAfter)
	return b, stale
}
