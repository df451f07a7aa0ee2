package dashboard

import (
	"fmt"
	"sort"
	"time"

	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// TimeLayout is how a reader is shown an instant (in UTC): the page's
// fmtTime, the reasons of the STALE banner and receiptctl's terminal all
// write 2026-12-05 05:41:57Z.
const TimeLayout = "2006-01-02 15:04:05Z"

// ChartHours is how many hourly bars the page's chart shows.
const ChartHours = 24

// Hour states of the chart (HourView.State).
const (
	// HourFinal: a final window with events.
	HourFinal = "final"
	// HourProvisional: an open or in_grace window; its count may change.
	HourProvisional = "provisional"
	// HourConfirmedZero: no events, the hour is final, and it is not
	// before the hour of the source's first event (docs/spec.md §3).
	HourConfirmedZero = "confirmed_zero"
	// HourNoData: no events so far, and the hour is not final (or its
	// status is unknown), or it is before the source's first event: never
	// shown as a zero.
	HourNoData = "no_data"
)

// View is what the page shows, pushed on every change.
type View struct {
	Generation string    `json:"generation"`
	Now        time.Time `json:"now"`
	// Connected is whether the dashboard is connected to NATS; Loaded
	// whether it has read the bucket at least once.
	Connected bool `json:"connected"`
	Loaded    bool `json:"loaded"`
	// Stale is the reader's verdict (see judgeStale); StaleReason says why.
	Stale bool `json:"stale"`
	// Starting: the publisher has not reported yet and the dashboard
	// started less than StaleAfter ago (a fresh deployment, not stale).
	Starting    bool         `json:"starting,omitempty"`
	StaleReason string       `json:"stale_reason,omitempty"`
	StaleAfter  string       `json:"stale_after"`
	Watch       WatchInfo    `json:"watch"`
	Health      *wire.Health `json:"health"`
	// Alerts are the pipeline's alerts from Prometheus, or why there are
	// none to show.
	Alerts AlertsView `json:"alerts"`
	// Owners is who owns each partition (the lease bucket), or that the
	// deployment runs on static indices.
	Owners OwnersView `json:"owners"`
	// Windows are the newest windows first (all of them from
	// /api/windows, Config.Recent on the page).
	Windows      []WindowView `json:"windows"`
	TotalWindows int          `json:"total_windows"`
	// Older is whether the bucket holds windows older than the oldest
	// of Windows (the page's "Older" control pages to them).
	Older bool `json:"older"`
	// Before is set on a page back in time (/api/windows?before=ID):
	// Windows are those older than window ID, and Hours the ChartHours
	// ending with the newest of them. Empty for the live head.
	Before string `json:"before,omitempty"`
	// Hours are the chart's last ChartHours hours, oldest first.
	Hours []HourView `json:"hours"`
}

// WatchInfo describes the dashboard's KV watch. QuietChecks counts the
// silences after which the bucket was found not to have moved past the
// watch (an idle source): no re-watch, no reload.
type WatchInfo struct {
	Reloads     int64     `json:"reloads"`
	QuietChecks int64     `json:"quiet_checks"`
	LastReason  string    `json:"last_reason,omitempty"`
	LastReload  time.Time `json:"last_reload,omitzero"`
	LastUpdate  time.Time `json:"last_update,omitzero"`
}

// WindowView is one window as the reader sees it: the published snapshot
// plus the dashboard's judgment.
type WindowView struct {
	WindowID           string        `json:"window_id"`
	Start              time.Time     `json:"start"`
	End                time.Time     `json:"end"`
	Count              int64         `json:"count"`
	Version            int64         `json:"version"`
	Status             window.Status `json:"status"`
	Watermark          time.Time     `json:"watermark"`
	UpdatedAt          time.Time     `json:"updated_at"`
	FirstOutputVersion int64         `json:"first_output_version"`
	Corrections        int64         `json:"corrections"`
	LateDropped        int64         `json:"late_dropped"`
	// PublishedStale is the snapshot's own stale flag.
	PublishedStale bool `json:"published_stale"`
	// Final is whether the count can never change again.
	Final bool `json:"final"`
	// Stale: the snapshot was published stale, or the data is stale now
	// and the window is not final.
	Stale bool `json:"stale"`
	// CorrectedBy is how much the count changed after the first hourly
	// output: count minus the count at first output when the dashboard
	// saw that revision, else the corrections counted.
	CorrectedBy int64 `json:"corrected_by"`
	// FirstOutputCount is the count at the first hourly output, if known.
	FirstOutputCount *int64         `json:"first_output_count,omitempty"`
	Partitions       []wire.Partial `json:"partitions,omitempty"`
	// The window's breakdown by store (amounts in cents), as published.
	wire.Breakdown
}

// HourView is one bar of the chart.
type HourView struct {
	WindowID string    `json:"window_id"`
	Start    time.Time `json:"start"`
	Count    int64     `json:"count"`
	// Status is the window's status ("" when unknown).
	Status      window.Status `json:"status,omitempty"`
	State       string        `json:"state"`
	Stale       bool          `json:"stale"`
	CorrectedBy int64         `json:"corrected_by"`
	LateDropped int64         `json:"late_dropped"`
}

// judgeStale is the reader's verdict on freshness at now: stale when the
// publisher has not reported for staleAfter (or not since the reader
// started, at started), when it says the source is stale, or when the
// source's last message is older than staleAfter. No report within
// staleAfter of started is starting (see isStarting), not stale.
func judgeStale(h *wire.Health, now, started time.Time, staleAfter time.Duration) (bool, string) {
	switch {
	case isStarting(h, now, started, staleAfter):
		return false, ""
	case h == nil:
		return true, fmt.Sprintf("no health report from the publisher since this reader started at %s (stale after %s)",
			started.UTC().Format(TimeLayout), staleAfter)
	case now.Sub(h.UpdatedAt) > staleAfter:
		return true, fmt.Sprintf("the publisher has not reported since %s (stale after %s)",
			h.UpdatedAt.UTC().Format(TimeLayout), staleAfter)
	case h.Stale:
		return true, fmt.Sprintf("the source has sent nothing since %s (stale after %s)",
			sourceSince(h), h.StaleAfter)
	case !h.SourceLastSeen.IsZero() && now.Sub(h.SourceLastSeen) > staleAfter:
		return true, fmt.Sprintf("the source has sent nothing since %s (stale after %s)",
			sourceSince(h), staleAfter)
	}
	return false, ""
}

// isStarting reports whether a reader that started at started is still
// waiting, at now, for the publisher's first report: a fresh deployment.
func isStarting(h *wire.Health, now, started time.Time, staleAfter time.Duration) bool {
	return h == nil && now.Sub(started) < staleAfter
}

func sourceSince(h *wire.Health) string {
	if h.SourceLastSeen.IsZero() {
		return "the start (no message yet)"
	}
	return h.SourceLastSeen.UTC().Format(TimeLayout)
}

// buildView builds the view of st at now. recent > 0 keeps only the
// newest windows, without their partitions.
func (s *Service) buildView(recent int, partitions bool) View {
	return s.buildPage("", recent, partitions)
}

// buildPage is buildView of the windows older than window id before
// (every window when before is ""): the newest recent of them (all when
// recent <= 0), and the chart's hours ending with the newest of them.
func (s *Service) buildPage(before string, recent int, partitions bool) View {
	now := s.cfg.Now().UTC()
	alerts := s.alerts.snapshot()
	owners := s.owners.snapshot()
	st := s.st
	st.mu.Lock()
	defer st.mu.Unlock()
	v := View{
		Generation: st.generation, Now: now, Connected: st.connected, Loaded: st.loaded,
		StaleAfter: s.cfg.StaleAfter.String(), Health: st.cur.health, Alerts: alerts, Owners: owners,
		Watch: WatchInfo{Reloads: st.reloads, QuietChecks: st.quiet, LastReason: st.lastReason, LastReload: st.lastReload, LastUpdate: st.lastUpdate},
	}
	v.Stale, v.StaleReason = judgeStale(st.cur.health, now, s.started, s.cfg.StaleAfter)
	v.Starting = isStarting(st.cur.health, now, s.started, s.cfg.StaleAfter)
	ids := make([]string, 0, len(st.cur.windows))
	for id := range st.cur.windows {
		ids = append(ids, id)
	}
	sort.Sort(sort.Reverse(sort.StringSlice(ids))) // ids sort by start
	v.TotalWindows = len(ids)
	v.Before = before
	byID := make(map[string]WindowView, len(ids))
	listed := 0
	var pageEnd time.Time // the chart's last hour on a page back in time
	for _, id := range ids {
		w := st.cur.windows[id]
		wv := windowView(w, v.Stale, st.firstCount)
		byID[id] = wv
		if before != "" && id >= before {
			continue
		}
		if listed == 0 && before != "" {
			pageEnd = w.Start
		}
		listed++
		if listed > recent && recent > 0 {
			v.Older = true
			continue
		}
		if partitions {
			wv.Partitions = w.Partitions
		}
		v.Windows = append(v.Windows, wv)
	}
	if v.Windows == nil {
		v.Windows = []WindowView{}
	}
	v.Hours = hours(byID, ids, st.cur.health, v.Stale, now, pageEnd)
	return v
}

func windowView(w wire.Window, staleNow bool, first map[string]int64) WindowView {
	final := w.Status == window.StatusFinal
	wv := WindowView{
		WindowID: w.WindowID, Start: w.Start, End: w.End, Count: w.Count, Version: w.Version, Status: w.Status,
		Watermark: w.Watermark, UpdatedAt: w.UpdatedAt, FirstOutputVersion: w.FirstOutputVersion,
		Corrections: w.Corrections, LateDropped: w.LateDropped, PublishedStale: w.Stale,
		Final: final, Stale: !final && (w.Stale || staleNow), CorrectedBy: w.Corrections,
		Breakdown: w.Breakdown,
	}
	if wv.ByStore == nil {
		wv.ByStore = []wire.StoreTotal{} // a snapshot from before breakdowns
	}
	if c, ok := first[w.WindowID]; ok {
		wv.FirstOutputCount = &c
		wv.CorrectedBy = w.Count - c
	}
	return wv
}

// hours builds the chart's bars: the ChartHours hours ending with the
// current hour (or with the newest data when all of it is older). An
// empty hour is a confirmed zero only when it is final and not before the
// first hour with data (see firstData); idsDesc are the windows' ids,
// newest first. A non-zero pageEnd is the last hour of a page back in
// time, which the chart then ends with.
func hours(byID map[string]WindowView, idsDesc []string, h *wire.Health, staleNow bool, now, pageEnd time.Time) []HourView {
	last := now.Truncate(time.Hour)
	var newest time.Time
	if len(idsDesc) > 0 {
		newest = byID[idsDesc[0]].Start
	}
	first, anyData := firstData(byID, idsDesc)
	if h != nil && h.GlobalWatermark.Year() < 9999 && h.GlobalWatermark.After(newest) {
		newest = h.GlobalWatermark.Truncate(time.Hour)
	}
	if newest.After(last) || (!newest.IsZero() && newest.Before(last.Add(-(ChartHours-1)*time.Hour))) {
		last = newest.Truncate(time.Hour)
	}
	if !pageEnd.IsZero() {
		last = pageEnd.Truncate(time.Hour)
	}
	grace, graceOK := time.Duration(0), false
	if h != nil {
		if g, err := time.ParseDuration(h.Grace); err == nil {
			grace, graceOK = g, true
		}
	}
	out := make([]HourView, 0, ChartHours)
	for i := ChartHours - 1; i >= 0; i-- {
		start := last.Add(-time.Duration(i) * time.Hour)
		id := start.Format(window.IDLayout)
		hv := HourView{WindowID: id, Start: start}
		if wv, ok := byID[id]; ok {
			hv.Count, hv.Status, hv.Stale, hv.CorrectedBy, hv.LateDropped = wv.Count, wv.Status, wv.Stale, wv.CorrectedBy, wv.LateDropped
			hv.State = HourProvisional
			if wv.Final {
				hv.State = HourFinal
			}
			if wv.Final && wv.Count == 0 {
				hv.State = HourConfirmedZero
			}
		} else {
			hv.State = HourNoData
			if graceOK && !h.GlobalWatermark.IsZero() {
				end := start.Add(window.Width)
				hv.Status = window.StatusOf(window.Ms(h.GlobalWatermark), window.Ms(end), grace.Milliseconds())
				if hv.Status == window.StatusFinal && anyData && !start.Before(first) {
					hv.State = HourConfirmedZero
				}
			}
			hv.Stale = staleNow && hv.State != HourConfirmedZero
		}
		out = append(out, hv)
	}
	return out
}

// firstData returns the start of the oldest window the bucket holds: the
// hour of the source's first counted event, or of the oldest one kept
// (the publisher prunes windows beyond its retention, docs/history.md).
// Window snapshots exist only for hours with a submission, so no hour
// before it is known to have had data; they are "no data", never zeros
// (docs/spec.md §3): the answer that is never wrong.
// It reports false when there is no window yet (only heartbeats, or
// events of other types, so far). An hour before the first submission that
// held only draft_saved or viewed events is shown as "no data" too: the
// bucket does not record it, and "no data" is the answer that is never
// wrong.
func firstData(byID map[string]WindowView, idsDesc []string) (time.Time, bool) {
	if len(idsDesc) == 0 {
		return time.Time{}, false
	}
	return byID[idsDesc[len(idsDesc)-1]].Start, true
}

// View returns what the page shows now: the newest recent windows (all
// of them when recent <= 0, without their partitions), the chart's hours,
// the health report and the reader's staleness verdict. Safe for
// concurrent use, also while Run runs.
func (s *Service) View(recent int) View { return s.buildView(recent, false) }

func (s *Service) pageView() View { return withTopStores(s.buildView(s.cfg.Recent, false), PageStores) }

// PageStores is how many stores of each window the page's view carries
// (its Top stores card shows five): the others are added to
// other_stores, so the view pushed to every open page on each change stays
// small whatever the number of stores. /api/windows keeps the snapshot's
// list (wire.TopStores).
const PageStores = 5

// withTopStores returns v with each window's breakdown cut to its first n
// stores, the ones cut summed into other_stores; the totals are kept.
func withTopStores(v View, n int) View {
	ws := make([]WindowView, len(v.Windows))
	for i, w := range v.Windows {
		if len(w.ByStore) > n {
			b := w.Breakdown
			for _, st := range b.ByStore[n:] {
				b.OtherStores.Add(st)
			}
			b.ByStore = b.ByStore[:n:n]
			w.Breakdown = b
		}
		ws[i] = w
	}
	v.Windows = ws
	return v
}
