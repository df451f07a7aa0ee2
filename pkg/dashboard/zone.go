package dashboard

import (
	"net/http"
	"time"

	"github.com/receiptflow/receiptflow/pkg/history"
)

// zoneSpan bounds /api/zone's range: the page asks for about two years.
const zoneSpan = 20 * 366 * 24 * time.Hour

// ZoneView is the body of GET /api/zone: a zone's periods (offset and
// abbreviation) over [from, to), from which the page labels hours as
// history.HourLabel does, or why the zone is refused.
type ZoneView struct {
	Zone    string           `json:"zone"`
	Periods []history.Period `json:"periods,omitempty"`
	Error   string           `json:"error,omitempty"`
}

// serveZone is GET /api/zone?tz=NAME&from=RFC3339&to=RFC3339 (default
// a year either side of now). An unknown zone, or one whose offset is not
// a whole number of hours somewhere in the range, is a 400 whose error
// names it; so is a bad or too long range.
func (s *Service) serveZone(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	name := q.Get("tz")
	if name == "" {
		name = "UTC"
	}
	now := s.cfg.Now().UTC()
	from, to := now.AddDate(-1, 0, 0), now.AddDate(1, 0, 0)
	for _, b := range []struct {
		key string
		t   *time.Time
	}{{"from", &from}, {"to", &to}} {
		if v := q.Get(b.key); v != "" {
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				writeJSON(w, http.StatusBadRequest, ZoneView{Zone: name, Error: b.key + " must be an RFC 3339 time"})
				return
			}
			*b.t = t.UTC()
		}
	}
	if !from.Before(to) || to.Sub(from) > zoneSpan {
		writeJSON(w, http.StatusBadRequest, ZoneView{Zone: name, Error: "from must be before to, at most 20 years apart"})
		return
	}
	loc, err := history.LoadZone(name)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, ZoneView{Zone: name, Error: err.Error()})
		return
	}
	ps, err := history.Periods(loc, from, to)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, ZoneView{Zone: name, Error: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, ZoneView{Zone: loc.String(), Periods: ps})
}
