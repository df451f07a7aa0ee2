package publisher

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/receiptflow/receiptflow/pkg/config"
	"github.com/receiptflow/receiptflow/pkg/ledger"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// historyRig is a publisher on a real nats-server and miniredis, driven
// directly (resync, history) rather than by its consume loop, with the
// windower's Lua scripts applying events and retiring state.
type historyRig struct {
	t     *testing.T
	ctx   context.Context
	js    jetstream.JetStream
	kv    jetstream.KeyValue
	store *ledger.Store
	svc   *Service
	reg   *prometheus.Registry // svc's metrics
	rdb   *redis.Client
	seq   []uint64
}

const (
	rigGrace   = 10 * time.Minute
	rigHorizon = time.Hour
)

func newHistoryRig(t *testing.T, retention time.Duration) *historyRig {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	_, url := testenv.NATS(t)
	js := testenv.JetStream(t, url)
	names := wire.For("")
	if err := stream.Ensure(ctx, js, names, stream.Config{Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, names.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	mr := testenv.Miniredis(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	store := ledger.NewStore(rdb, ledger.Config{Keys: ledger.Keys{Prefix: names.RedisPrefix()}, Grace: rigGrace, Horizon: rigHorizon})
	r := &historyRig{t: t, ctx: ctx, js: js, kv: kv, store: store, rdb: rdb, seq: make([]uint64, 2)}
	r.svc = r.publisher(retention)
	r.reg = prometheus.NewRegistry()
	r.svc.m = newMetrics(r.reg)
	return r
}

// publisher returns a new publisher instance on the rig's servers (a
// restart, or a second publisher).
func (r *historyRig) publisher(retention time.Duration) *Service {
	s := New(r.js, r.store, Config{Names: wire.For(""), Partitions: 2, Grace: rigGrace, WindowRetention: retention,
		DayRetention: 48 * time.Hour})
	s.kv = r.kv
	return s
}

// submit applies one submission per time to partition p.
func (r *historyRig) submit(p int, ids ...string) {
	r.t.Helper()
	var recs []ledger.Record
	for _, id := range ids {
		at, err := time.Parse(time.RFC3339, id)
		if err != nil {
			r.t.Fatal(err)
		}
		r.seq[p]++
		recs = append(recs, ledger.Record{Seq: r.seq[p], Kind: ledger.Submission, EventID: id + "/" + string(rune('a'+p)), Time: window.Ms(at)})
	}
	if _, err := r.store.Apply(r.ctx, p, recs, 0, 0); err != nil {
		r.t.Fatal(err)
	}
}

// retire retires, in every partition, the windows ending at or before
// mark, as the windower's retire pass does.
func (r *historyRig) retire(mark time.Time) {
	r.t.Helper()
	for p := 0; p < 2; p++ {
		ids, err := r.store.Windows(r.ctx, p)
		if err != nil {
			r.t.Fatal(err)
		}
		var gone []string
		for _, id := range ids {
			start, _ := window.ParseID(id)
			if start+window.WidthMs <= window.Ms(mark) {
				gone = append(gone, id)
			}
		}
		if _, err := r.store.Retire(r.ctx, p, window.Ms(mark), gone); err != nil {
			r.t.Fatal(err)
		}
	}
}

// lastSeq is the bucket stream's last sequence: it moves with every write,
// purge included.
func (r *historyRig) lastSeq() uint64 {
	r.t.Helper()
	st, err := r.js.Stream(r.ctx, "KV_"+wire.For("").Bucket())
	if err != nil {
		r.t.Fatal(err)
	}
	info, err := st.Info(r.ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	return info.State.LastSeq
}

func (r *historyRig) window(id string) (wire.Window, bool) {
	r.t.Helper()
	e, err := r.kv.Get(r.ctx, wire.WindowKey(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return wire.Window{}, false
	}
	if err != nil {
		r.t.Fatal(err)
	}
	var w wire.Window
	if err := json.Unmarshal(e.Value(), &w); err != nil {
		r.t.Fatal(err)
	}
	return w, true
}

func (r *historyRig) day(d string) (wire.Day, uint64) {
	r.t.Helper()
	e, err := r.kv.Get(r.ctx, wire.DayKey(d))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return wire.Day{}, 0
	}
	if err != nil {
		r.t.Fatal(err)
	}
	var day wire.Day
	if err := json.Unmarshal(e.Value(), &day); err != nil {
		r.t.Fatal(err)
	}
	return day, e.Revision()
}

func (r *historyRig) pass(s *Service) {
	r.t.Helper()
	if err := s.resync(r.ctx); err != nil {
		r.t.Fatal(err)
	}
	if err := s.history(r.ctx); err != nil {
		r.t.Fatal(err)
	}
}

// The rig's traffic: 2026-12-01T22..23 and 2026-12-02T00..05 in both
// partitions, then both partitions move to 2026-12-02T08:00 (with lateness
// 0 and grace 10m every window up to T06 is final, T07 is in grace).
func (r *historyRig) traffic() {
	r.submit(0, "2026-12-01T22:10:00Z", "2026-12-01T22:20:00Z", "2026-12-01T23:05:00Z",
		"2026-12-02T00:01:00Z", "2026-12-02T01:30:00Z", "2026-12-02T02:30:00Z", "2026-12-02T05:59:00Z")
	r.submit(1, "2026-12-01T23:15:00Z", "2026-12-02T00:40:00Z", "2026-12-02T00:50:00Z",
		"2026-12-02T03:00:00Z", "2026-12-02T04:00:00Z")
	r.submit(0, "2026-12-02T08:00:00Z")
	r.submit(1, "2026-12-02T08:00:00Z")
}

// TestDayRollupIsTheSumOfItsHours: each day key holds every hour's last
// snapshot and its totals are their sums; a replay (a restarted publisher
// publishing the same state again) writes nothing; more data raises the
// day's version.
func TestDayRollupIsTheSumOfItsHours(t *testing.T) {
	r := newHistoryRig(t, 3*time.Hour)
	r.traffic()
	r.pass(r.svc)
	for _, d := range []string{"2026-12-01", "2026-12-02"} {
		day, rev := r.day(d)
		if rev == 0 {
			t.Fatalf("no rollup of %s", d)
		}
		var count, version int64
		hours := 0
		for h := 0; h < 24; h++ {
			id := d + "T" + string(rune('0'+h/10)) + string(rune('0'+h%10))
			w, ok := r.window(id)
			if !ok {
				if _, in := day.Hours[wire.HourKey(id)]; in {
					t.Errorf("%s: rollup has hour %s, the bucket has no window", d, id)
				}
				continue
			}
			hours++
			got := day.Hours[wire.HourKey(id)]
			if got.Count != w.Count || got.Version != w.Version || got.Corrections != w.Corrections || got.Status != w.Status {
				t.Errorf("%s: rollup hour %+v, window %+v", id, got, w)
			}
			count += w.Count
			version += w.Version
		}
		if day.Final {
			version++
		}
		if day.Count != count || day.Version != version || day.Windows != hours {
			t.Errorf("%s: rollup count %d version %d windows %d, want %d %d %d", d, day.Count, day.Version, day.Windows, count, version, hours)
		}
	}
	if d, _ := r.day("2026-12-01"); !d.Final || d.Count != 4 {
		t.Errorf("2026-12-01: %+v, want final with 4", d)
	}
	if d, _ := r.day("2026-12-02"); d.Final || d.Count != 8+2 {
		t.Errorf("2026-12-02: %+v, want not final with 10", d)
	}

	before := r.lastSeq()
	r.pass(r.svc)
	again := r.publisher(3 * time.Hour) // a restart: nothing cached
	r.pass(again)
	if after := r.lastSeq(); after != before {
		t.Fatalf("a replay that changes nothing wrote %d entries", after-before)
	}

	old, _ := r.day("2026-12-02")
	r.submit(1, "2026-12-02T07:55:00Z") // a correction of T07, in grace
	r.pass(again)
	now, _ := r.day("2026-12-02")
	if now.Version <= old.Version || now.Count != old.Count+1 || now.Corrections != old.Corrections+1 {
		t.Fatalf("after a correction: %+v, before %+v", now, old)
	}
}

// TestRollupNeverMovesBack: folding an older snapshot of an hour into a
// rollup keeps the newer one, finality never goes back, and the version
// is monotone.
func TestRollupNeverMovesBack(t *testing.T) {
	start := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	empty := wire.Day{Day: "2026-12-02", Start: start, End: start.Add(24 * time.Hour)}
	snap := func(id string, count, version int64, st window.Status) wire.Window {
		return wire.Window{WindowID: id, Count: count, Version: version, Status: st}
	}
	end := window.Ms(start.Add(24*time.Hour)) + rigGrace.Milliseconds()
	d := rollupDay(empty, []wire.Window{snap("2026-12-02T10", 5, 3, window.StatusInGrace)}, end-1, rigGrace)
	if d.Count != 5 || d.Version != 3 || d.Final {
		t.Fatalf("first fold: %+v", d)
	}
	d2 := rollupDay(d, []wire.Window{snap("2026-12-02T10", 4, 2, window.StatusInGrace)}, end-1, rigGrace)
	if !sameDay(d, d2) || d2.Version != 3 {
		t.Fatalf("an older snapshot moved the rollup: %+v", d2)
	}
	if d3 := rollupDay(d, nil, end, rigGrace); d3.Final {
		t.Fatalf("final with a non-final hour: %+v", d3)
	}
	d4 := rollupDay(d, []wire.Window{snap("2026-12-02T10", 6, 5, window.StatusFinal)}, end, rigGrace)
	if !d4.Final || d4.Version != 5+1 || d4.Count != 6 {
		t.Fatalf("final fold: %+v", d4)
	}
	if d5 := rollupDay(d4, nil, end-1, rigGrace); !d5.Final || d5.Version != d4.Version {
		t.Fatalf("finality went back with an older watermark: %+v", d5)
	}
}

// TestPruneOnlyFinalRetiredBeyondRetention: windows beyond the retention
// (behind the newest window) stay until every partition retired them;
// then exactly those are pruned, the day rollups do not change, the
// pruned windows never come back, and the windows inside retention stay.
func TestPruneOnlyFinalRetiredBeyondRetention(t *testing.T) {
	r := newHistoryRig(t, 3*time.Hour)
	r.traffic()
	r.pass(r.svc)
	// Head: T08 (ends 09:00); retention 3h: windows ending at or before
	// 06:00 (T22 .. T05) are beyond it, but none is retired yet.
	if _, ok := r.window("2026-12-01T22"); !ok {
		t.Fatal("T22 pruned before its state was retired")
	}
	d1, rev1 := r.day("2026-12-01")
	d2, rev2 := r.day("2026-12-02")

	// Partition 0 alone retires up to 04:00: not enough.
	if _, err := r.store.Retire(r.ctx, 0, window.Ms(time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC)), []string{
		"2026-12-01T22", "2026-12-01T23", "2026-12-02T00", "2026-12-02T01", "2026-12-02T02"}); err != nil {
		t.Fatal(err)
	}
	r.pass(r.svc)
	if _, ok := r.window("2026-12-01T22"); !ok {
		t.Fatal("T22 pruned while partition 1 still holds its state")
	}
	// Both retire up to 04:00 (the windower's horizon allows 06:50).
	r.retire(time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC))
	var logs bytes.Buffer
	r.svc.cfg.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	r.pass(r.svc)
	if n := strings.Count(logs.String(), `"msg":"history pruned"`); n != 1 || !strings.Contains(logs.String(), `"windows":6`) {
		t.Errorf("want one log line for the pass that pruned 6 windows, got %d:\n%s", n, logs.String())
	}
	for _, id := range []string{"2026-12-01T22", "2026-12-01T23", "2026-12-02T00", "2026-12-02T01", "2026-12-02T02", "2026-12-02T03"} {
		if w, ok := r.window(id); ok {
			t.Errorf("%s not pruned: %+v", id, w)
		}
	}
	for _, id := range []string{"2026-12-02T04", "2026-12-02T05", "2026-12-02T08"} {
		if _, ok := r.window(id); !ok {
			t.Errorf("%s pruned: not retired or inside the retention", id)
		}
	}
	mfs, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	pruned := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() == "receiptflow_publisher_pruned_total" {
			for _, m := range mf.GetMetric() {
				pruned[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
			}
		}
	}
	if pruned["window"] != 6 || pruned["day"] != 0 {
		t.Errorf("receiptflow_publisher_pruned_total: %v, want 6 windows, 0 days", pruned)
	}
	if got, rev := r.day("2026-12-01"); rev != rev1 || !sameDay(got, d1) {
		t.Errorf("pruning changed 2026-12-01's rollup: %+v, was %+v", got, d1)
	}
	if got, rev := r.day("2026-12-02"); rev != rev2 || !sameDay(got, d2) {
		t.Errorf("pruning changed 2026-12-02's rollup: %+v, was %+v", got, d2)
	}
	// A late event of a pruned window, a notice naming it, a restart: the
	// window is not re-created, and the bucket does not change.
	before := r.lastSeq()
	r.submit(1, "2026-12-01T22:30:00Z")
	again := r.publisher(3 * time.Hour)
	r.pass(again)
	if err := again.publishLocked(r.ctx, []string{"2026-12-01T22", "2026-12-02T00"}); err != nil {
		t.Fatal(err)
	}
	if w, ok := r.window("2026-12-01T22"); ok {
		t.Fatalf("a pruned window came back: %+v", w)
	}
	if after := r.lastSeq(); after != before {
		t.Fatalf("the bucket changed after pruning: %d new entries", after-before)
	}
}

// TestKeepHistoryPrunesNothing: a bounded run's publisher keeps every
// window (its artifacts and parity need them all).
func TestKeepHistoryPrunesNothing(t *testing.T) {
	r := newHistoryRig(t, 3*time.Hour)
	r.svc.cfg.KeepHistory = true
	r.traffic()
	r.pass(r.svc)
	r.retire(time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC))
	r.pass(r.svc)
	if _, ok := r.window("2026-12-01T22"); !ok {
		t.Fatal("KeepHistory pruned a window")
	}
}

// TestRetentionTooShortRefused: the flags refuse a window retention
// shorter than grace + replay horizon (a window cannot be pruned before
// its state is retired) and a day retention shorter than the window
// retention; the library raises a too-short value to what it can honour.
func TestRetentionTooShortRefused(t *testing.T) {
	valid := func(win, day time.Duration) error {
		c := config.Common{Params: config.Params{Partitions: 8, Grace: time.Hour, ReplayHorizon: 24 * time.Hour, MaxFutureSkew: time.Minute},
			StaleAfter: time.Minute, Retention: time.Hour, DedupWindow: time.Minute, LatencyBudget: time.Millisecond,
			Generation: "1", WindowRetention: win, DayRetention: day}
		return c.Validate()
	}
	if err := valid(config.DefaultWindowRetention, config.DefaultDayRetention); err != nil {
		t.Fatalf("defaults refused: %v", err)
	}
	for _, c := range []struct{ win, day time.Duration }{{24 * time.Hour, 48 * time.Hour}, {0, 48 * time.Hour}, {48 * time.Hour, 47 * time.Hour}} {
		if err := valid(c.win, c.day); err == nil {
			t.Errorf("--window-retention %s --day-retention %s accepted", c.win, c.day)
		}
	}
	if err := valid(25*time.Hour, 25*time.Hour); err != nil {
		t.Errorf("grace + horizon exactly refused: %v", err)
	}
	store := ledger.NewStore(nil, ledger.Config{Keys: ledger.Keys{}, Grace: time.Hour, Horizon: 24 * time.Hour})
	win, day := retentions(Config{Grace: time.Hour, WindowRetention: time.Hour, DayRetention: time.Hour}, store)
	if win != 25*time.Hour || day != 25*time.Hour {
		t.Errorf("retentions raised to %s, %s; want 25h, 25h", win, day)
	}
	if win, day := retentions(Config{}, nil); win != config.DefaultWindowRetention || day != config.DefaultDayRetention {
		t.Errorf("default retentions %s, %s", win, day)
	}
}

// TestPruneDaysBeyondDayRetention: a final day whose hours are all pruned
// is pruned once it is more than the day retention behind the head; a day
// that still has windows, or is not final, stays.
func TestPruneDaysBeyondDayRetention(t *testing.T) {
	r := newHistoryRig(t, 3*time.Hour)
	r.svc.cfg.DayRetention = 3 * time.Hour
	r.traffic()
	r.pass(r.svc)
	r.retire(time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC))
	r.pass(r.svc) // prunes 2026-12-01's windows, then the day (ends 12-02T00, cut 06:00)
	if d, rev := r.day("2026-12-01"); rev != 0 {
		t.Fatalf("2026-12-01 kept: %+v", d)
	}
	if _, rev := r.day("2026-12-02"); rev == 0 {
		t.Fatal("2026-12-02 (not final, windows left) pruned")
	}
	before := r.lastSeq()
	r.pass(r.publisher(3 * time.Hour))
	if after := r.lastSeq(); after != before {
		t.Fatalf("a pruned day came back or changed the bucket: %d new entries", after-before)
	}
}

// TestTwoPublishersNeverMoveARollupBack: a publisher whose view of a day
// is out of date (another one wrote a newer rollup since) and that folds
// a snapshot older than the stored hour loses its compare-and-set,
// re-reads, and leaves the newer rollup as it is.
func TestTwoPublishersNeverMoveARollupBack(t *testing.T) {
	r := newHistoryRig(t, 3*time.Hour)
	r.traffic()
	r.submit(1, "2026-12-02T07:10:00Z")
	r.pass(r.svc)
	reg := prometheus.NewRegistry()
	lagging := New(r.js, r.store, Config{Names: wire.For(""), Partitions: 2, Grace: rigGrace, WindowRetention: 3 * time.Hour,
		Registerer: reg})
	lagging.kv = r.kv
	r.pass(lagging) // caches 2026-12-02 as it is now
	old, _ := r.day("2026-12-02")
	r.submit(1, "2026-12-02T07:20:00Z")
	r.submit(0, "2026-12-02T07:30:00Z")
	r.pass(r.svc)
	cur, rev := r.day("2026-12-02")
	h := cur.Hours["07"]
	if h.Version < old.Hours["07"].Version+2 || h.Count != 3 {
		t.Fatalf("hour 07 after two more events: %+v (was %+v)", h, old.Hours["07"])
	}
	stale := wire.Window{WindowID: "2026-12-02T07", Count: 999, Version: old.Hours["07"].Version + 1, Status: window.StatusInGrace}
	lagging.mu.Lock()
	err := lagging.rollupLocked(r.ctx, []wire.Window{stale}, window.Ms(time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)), time.Now())
	lagging.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if got, gotRev := r.day("2026-12-02"); gotRev != rev || !sameDay(got, cur) {
		t.Fatalf("a lagging publisher moved the rollup: %+v, was %+v", got.Hours["07"], h)
	}
	if n := counter(t, reg, "receiptflow_publisher_kv_conflicts_total"); n < 1 {
		t.Fatalf("the lagging publisher's write did not go through a lost compare-and-set (%v conflicts)", n)
	}
}

// counter is the value of the counter name in reg.
func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no counter %s", name)
	return 0
}

// TestHistoryPassCatchesUpARollup: a rollup left behind its hours' snapshots
// (a crash between the window write and the rollup write, then the
// windower retired the window so no resync sees it again) is brought up to
// date by the next publisher's history pass, from the snapshots in the
// bucket, and only then is the window pruned.
func TestHistoryPassCatchesUpARollup(t *testing.T) {
	r := newHistoryRig(t, 3*time.Hour)
	r.traffic()
	r.pass(r.svc)
	want, rev := r.day("2026-12-01")
	behind := want
	behind.Hours = map[string]wire.DayHour{"22": want.Hours["22"]} // hour 23 never made it
	behind.Total()
	body, err := json.Marshal(&behind)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.kv.Update(r.ctx, wire.DayKey("2026-12-01"), body, rev); err != nil {
		t.Fatal(err)
	}
	r.retire(time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC))
	restarted := r.publisher(3 * time.Hour)
	if err := restarted.history(r.ctx); err != nil {
		t.Fatal(err)
	}
	got, _ := r.day("2026-12-01")
	if !reflect.DeepEqual(got.Hours, want.Hours) || got.Count != want.Count || got.Version != want.Version {
		t.Fatalf("rollup after the history pass: %+v, want %+v", got, want)
	}
	if _, ok := r.window("2026-12-01T23"); ok {
		t.Fatal("2026-12-01T23 not pruned once its rollup caught up")
	}
}

// TestBatchStepsTimed: a batch of change notices is timed step by step in
// receiptflow_publisher_batch_step_seconds, its wait counted from when its
// first notice was stored; the start's resync is not a batch and is not
// timed.
func TestBatchStepsTimed(t *testing.T) {
	r := newHistoryRig(t, 3*time.Hour)
	r.submit(0, "2026-12-02T10:15:00Z", "2026-12-02T10:20:00Z")
	r.submit(1, "2026-12-02T10:25:00Z")
	if err := r.svc.resync(r.ctx); err != nil {
		t.Fatal(err)
	}
	if steps := testenv.HistogramByLabel(t, r.reg, "receiptflow_publisher_batch_step_seconds", "step"); len(steps) != 0 {
		t.Fatalf("the resync was timed as a batch: %v", steps)
	}
	r.submit(0, "2026-12-02T10:30:00Z")
	names := wire.For("")
	body, _ := json.Marshal(&wire.Change{Partition: 0, Seq: 3, Windows: []string{"2026-12-02T10"}})
	if _, err := r.js.Publish(r.ctx, names.Subject(wire.Changes, 0), body); err != nil {
		t.Fatal(err)
	}
	c, err := r.js.CreateOrUpdateConsumer(r.ctx, names.Stream(wire.Changes), jetstream.ConsumerConfig{Durable: "steps", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	const idle = 300 * time.Millisecond
	time.Sleep(idle)
	got, err := c.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var batch []jetstream.Msg
	for m := range got.Messages() {
		batch = append(batch, m)
	}
	if len(batch) != 1 {
		t.Fatalf("fetched %d notices, want 1 (%v)", len(batch), got.Error())
	}
	if _, err := r.svc.handle(r.ctx, batch); err != nil {
		t.Fatal(err)
	}
	if w, ok := r.window("2026-12-02T10"); !ok || w.Count != 4 {
		t.Fatalf("window after the batch: %+v (%v), want count 4", w, ok)
	}
	steps := testenv.HistogramByLabel(t, r.reg, "receiptflow_publisher_batch_step_seconds", "step")
	for _, s := range []string{stepWait, stepRead, stepPut, stepRollup} {
		if steps[s].Count != 1 || steps[s].Sum <= 0 {
			t.Errorf("step %s: %+v, want the one batch timed", s, steps[s])
		}
	}
	if got := time.Duration(steps[stepWait].Sum * float64(time.Second)); got < idle {
		t.Errorf("the batch waited %s, want at least the %s between its notice's storing and its handling", got, idle)
	}
}

// countingKV counts the compare-and-set updates made through it (a put
// that waits for its own answer).
type countingKV struct {
	jetstream.KeyValue
	updates map[string]int
}

func (c *countingKV) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	c.updates[key]++
	return c.KeyValue.Update(ctx, key, value, rev)
}

// TestDayRollupGoesBesideTheSnapshots: once the publisher knows a day's
// rollup, a batch that changes its hours stores the rollup beside the
// hours' snapshots, not in a put of its own after them, and the rollup is
// still the fold of the snapshots as stored. A rollup another publisher
// moved meanwhile is a lost race, and is written again from the bucket.
func TestDayRollupGoesBesideTheSnapshots(t *testing.T) {
	r := newHistoryRig(t, 3*time.Hour)
	counting := &countingKV{KeyValue: r.kv, updates: map[string]int{}}
	r.svc.kv = counting
	r.traffic()
	r.pass(r.svc) // first sight of both days: read, then created
	const d = "2026-12-02"
	key := wire.DayKey(d)
	check := func(want int64) {
		t.Helper()
		day, _ := r.day(d)
		w, _ := r.window("2026-12-02T08")
		if got := day.Hours[wire.HourKey("2026-12-02T08")]; got.Count != w.Count || got.Version != w.Version || w.Count != want {
			t.Fatalf("rollup hour T08 %+v, window %+v, want count %d in both", got, w, want)
		}
	}
	before := counting.updates[key]
	r.submit(0, "2026-12-02T08:10:00Z", "2026-12-02T08:20:00Z")
	if err := r.svc.resync(r.ctx); err != nil {
		t.Fatal(err)
	}
	check(4)
	if n := counting.updates[key] - before; n != 0 {
		t.Errorf("the rollup of %s took %d puts of its own after the snapshots, want none", d, n)
	}

	// Another publisher moves the rollup: this one's next put beside the
	// snapshots loses the race, and the day is read and written again.
	other := r.publisher(3 * time.Hour)
	other.m = newMetrics(prometheus.NewRegistry())
	r.submit(1, "2026-12-02T08:30:00Z")
	if err := other.resync(r.ctx); err != nil {
		t.Fatal(err)
	}
	r.submit(1, "2026-12-02T08:40:00Z")
	raced := counting.updates[key]
	if err := r.svc.resync(r.ctx); err != nil {
		t.Fatal(err)
	}
	check(6)
	if counting.updates[key] == raced {
		t.Errorf("the lost race was not written again through a read of the bucket")
	}
}
