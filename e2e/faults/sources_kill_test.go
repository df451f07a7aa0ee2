package faults

// A source killed mid-file and run again (docs/spec.md §3.1): source F, a
// `receiptctl ingest --events FILE` of a few stores' hours 10–12 in
// event-time order, runs side by side with source L, a live feed of
// another store's hour 13 written slowly through a named pipe, with a
// heartbeat every --heartbeat-interval (100ms; not --heartbeat-every,
// which is a recorded parameter of the deployment: ingest refuses any
// value but the recorded 1000). F is SIGKILLed mid-file, so it
// leaves no leaving heartbeat: it stays a live source of its partitions
// until --source-idle of their broker time has passed without its
// progress growing.
//
//   - Run again under its own id (the same command line: the default id is
//     the host name and the file's absolute path) within --source-idle, F
//     simply continues: every window equals a single-source run of the
//     same events in event-time order, nothing is late, and reconcile
//     holds.
//   - Left dead for longer than --source-idle (5s here) while L's
//     heartbeats keep the partitions' broker clock going, F stops holding
//     its partitions: their watermark moves on to L's progress. F's file
//     run again under a new id is then a new source whose events are
//     behind the moved watermark: what RAW stored before the kill is a
//     duplicate and counted once, the rest is judged against the moved
//     watermark (a correction within grace, LATE after it), and nothing
//     is counted twice.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/boundedrun"
	"github.com/receiptflow/receiptflow/pkg/config"
	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/pipeline"
	"github.com/receiptflow/receiptflow/pkg/reconcile"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// The stores of the kill tests, each in a partition of its own: L's
// store-live (3), F's store-file-1..3 (5, 4, 7).
var (
	liveStore  = "store-live"
	fileStores = []string{"store-file-1", "store-file-2", "store-file-3"}
)

const (
	// fileEventsPerStore: F's file holds this many events of each of its
	// stores, over hours 10–12.
	fileEventsPerStore = 3000
	// feedEvents of hour 13 are written to L one every feedEvery, a
	// heartbeat following every feedBeat (--heartbeat-interval).
	feedEvents = 1000
	feedEvery  = 25 * time.Millisecond
	feedBeat   = "100ms"
	// feedRest is the pace of the feed's last events, once the test has
	// seen what it looks for.
	feedRest = 2 * time.Millisecond
	// killAt is the share of F's file RAW holds when F is killed;
	// killLow and killHigh bound what it may really hold then.
	killAt             = 0.4
	killLow, killHigh  = 0.2, 0.8
	killSourcesTimeout = 4 * time.Minute
)

// fileAndFeed is the input of the kill tests.
type fileAndFeed struct {
	file   []event // F's events, in file (event-time) order
	feed   []event // L's events
	path   string  // F's file
	byTime string  // all events in event-time order: the single-source run
	fileID string  // F's default source id: host:absolute path
}

func newFileAndFeed(t *testing.T) *fileAndFeed {
	t.Helper()
	requireDistinctPartitions(t, append([]string{liveStore}, fileStores...)...)
	day := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	var perStore [][]event
	for i, s := range fileStores {
		from := day.Add(10*time.Hour + time.Duration(i)*137*time.Millisecond)
		perStore = append(perStore, submissions(fmt.Sprintf("file%d", i+1), s, from, 3*time.Hour-time.Second, fileEventsPerStore))
	}
	in := &fileAndFeed{feed: submissions("live", liveStore, day.Add(13*time.Hour), time.Hour, feedEvents)}
	dir := t.TempDir()
	in.path = filepath.Join(dir, "file.ndjson")
	writeByTime(t, in.path, perStore...)
	in.byTime = filepath.Join(dir, "by-time.ndjson")
	writeByTime(t, in.byTime, append(perStore, in.feed)...)
	in.file = readEvents(t, in.path)
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	in.fileID = host + ":" + in.path // t.TempDir() is absolute
	return in
}

// readEvents reads the events of an NDJSON file written by writeByTime.
func readEvents(t *testing.T, path string) []event {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []event
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var ev struct {
			At time.Time `json:"occurred_at"`
		}
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatal(err)
		}
		out = append(out, event{at: ev.At.UTC(), line: []byte(l)})
	}
	return out
}

// fileParts are the partitions of F's stores.
func fileParts() []int {
	var ps []int
	for _, s := range fileStores {
		ps = append(ps, window.Partition(s, 8))
	}
	sort.Ints(ps)
	return ps
}

// startFileSource starts `receiptctl ingest --nats-url … args…` on a
// regular file: a source the test can SIGKILL (kill) or wait for.
func (d *deployment) startFileSource(ctx context.Context, name string, args ...string) *source {
	t := d.t
	t.Helper()
	s := &source{t: t, name: name, log: filepath.Join(logDir(t), name+".log"), done: make(chan struct{})}
	logf, err := os.Create(s.log)
	if err != nil {
		t.Fatal(err)
	}
	s.cmd = exec.CommandContext(ctx, filepath.Join(binaries(t), "receiptctl"), append([]string{"ingest", "--nats-url", d.natsURL}, args...)...)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		s.err = s.cmd.Wait()
		logf.Close()
		close(s.done)
	}()
	t.Cleanup(func() {
		select {
		case <-s.done:
		default:
			s.cmd.Process.Kill()
			<-s.done
		}
	})
	return s
}

// kill SIGKILLs the source's process and waits for it to be gone.
func (s *source) kill() {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		s.t.Fatalf("%s: SIGKILL: %v", s.name, err)
	}
	<-s.done
}

var jetStreamDuplicates = regexp.MustCompile(`(\d+) dropped by JetStream as duplicates`)

// duplicates is the number of records receiptctl ingest reported
// dropped by JetStream as duplicates (its summary line).
func (s *source) duplicates() int {
	s.t.Helper()
	b, _ := os.ReadFile(s.log)
	m := jetStreamDuplicates.FindSubmatch(b)
	if m == nil {
		s.t.Fatalf("%s: no summary line in its output:\n%s", s.name, s.logTail())
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// trickle writes a source's events from a goroutine of its own, one every
// `every`, as far as the test allows: a live feed the test can hold
// still and let go on while it does other things.
type trickle struct {
	s     *source
	evs   []event
	every time.Duration

	mu                   sync.Mutex
	limit, next, written int
	err                  error
	kick, done           chan struct{}
}

func (s *source) feedSlowly(ctx context.Context, evs []event, every time.Duration) *trickle {
	tr := &trickle{s: s, evs: evs, every: every, kick: make(chan struct{}, 1), done: make(chan struct{})}
	go tr.run(ctx)
	return tr
}

func (tr *trickle) run(ctx context.Context) {
	defer close(tr.done)
	for {
		tr.mu.Lock()
		for tr.next >= tr.limit {
			if tr.next == len(tr.evs) {
				tr.mu.Unlock()
				return
			}
			tr.mu.Unlock()
			select {
			case <-tr.kick:
			case <-ctx.Done():
				tr.mu.Lock()
				tr.err = ctx.Err()
				tr.mu.Unlock()
				return
			}
			tr.mu.Lock()
		}
		i := tr.next
		tr.next++
		tr.mu.Unlock()
		_, err := tr.s.in.Write(append(append([]byte(nil), tr.evs[i].line...), '\n'))
		tr.mu.Lock()
		if err != nil {
			tr.err = err
			tr.mu.Unlock()
			return
		}
		tr.written++
		tr.mu.Unlock()
		tr.mu.Lock()
		every := tr.every
		tr.mu.Unlock()
		pause(ctx, every)
	}
}

// allow lets the feed write up to n events in all.
func (tr *trickle) allow(n int) {
	tr.mu.Lock()
	tr.limit = max(tr.limit, min(n, len(tr.evs)))
	tr.mu.Unlock()
	select {
	case tr.kick <- struct{}{}:
	default:
	}
}

// sent is how many events the feed has written.
func (tr *trickle) sent() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.written
}

func (tr *trickle) check() {
	tr.s.t.Helper()
	tr.mu.Lock()
	err := tr.err
	tr.mu.Unlock()
	if err != nil {
		tr.s.t.Fatalf("%s: writing its input: %v\n%s", tr.s.name, err, tr.s.logTail())
	}
	if tr.s.exited() {
		tr.s.t.Fatalf("%s exited while its input was open: %v\n%s", tr.s.name, tr.s.err, tr.s.logTail())
	}
}

// hold stops the feed after the event it is writing and returns how many
// it has written.
func (tr *trickle) hold(ctx context.Context) int {
	tr.s.t.Helper()
	tr.mu.Lock()
	tr.limit = tr.next
	tr.mu.Unlock()
	for {
		tr.mu.Lock()
		n, next := tr.written, tr.next
		tr.mu.Unlock()
		if n == next {
			return n
		}
		tr.check()
		if ctx.Err() != nil {
			tr.s.t.Fatalf("%s: %v while holding the feed", tr.s.name, ctx.Err())
		}
		time.Sleep(probeEvery)
	}
}

// untilSent waits until the feed has written at least n events.
func (tr *trickle) untilSent(ctx context.Context, n int) {
	tr.s.t.Helper()
	for tr.sent() < n {
		tr.check()
		if ctx.Err() != nil {
			tr.s.t.Fatalf("%s: only %d of %d events written: %v", tr.s.name, tr.sent(), n, ctx.Err())
		}
		time.Sleep(probeEvery)
	}
}

// finish lets the feed write all its events, at a faster pace (every),
// closes its input and waits for ingest to exit 0.
func (tr *trickle) finish(ctx context.Context, every time.Duration) {
	tr.s.t.Helper()
	tr.mu.Lock()
	tr.every = every
	tr.mu.Unlock()
	tr.allow(len(tr.evs))
	select {
	case <-tr.done:
	case <-ctx.Done():
		tr.s.t.Fatalf("%s: %v before it wrote its input", tr.s.name, ctx.Err())
	}
	tr.check()
	tr.s.finish()
}

// rawMsg is one RAW message as the kill tests read it.
type rawMsg struct {
	seq       uint64
	stamp     time.Time // the broker's
	partition int
	source    string
	heartbeat bool
	eventID   string
	at        time.Time // event time
}

// readRAW reads every message RAW holds now, in order.
func readRAW(t *testing.T, ctx context.Context, admin *connect.Conn) []rawMsg {
	t.Helper()
	var out []rawMsg
	readAgain(t, "RAW", func() error {
		out = out[:0]
		return stream.ReadAll(ctx, admin.JS, wire.For("").Stream(wire.Raw), func(m jetstream.Msg) error {
			meta, err := m.Metadata()
			if err != nil {
				return err
			}
			subj := m.Subject()
			p, err := strconv.Atoi(subj[strings.LastIndexByte(subj, '.')+1:])
			if err != nil {
				return fmt.Errorf("RAW seq %d: subject %q", meta.Sequence.Stream, subj)
			}
			r := rawMsg{seq: meta.Sequence.Stream, stamp: meta.Timestamp, partition: p, source: m.Headers().Get(wire.HdrSource),
				heartbeat: m.Headers().Get(wire.HdrHeartbeat) != ""}
			if !r.heartbeat {
				var ev struct {
					EventID string    `json:"event_id"`
					At      time.Time `json:"occurred_at"`
				}
				if err := json.Unmarshal(m.Data(), &ev); err != nil {
					return fmt.Errorf("RAW seq %d: %w", r.seq, err)
				}
				r.eventID, r.at = ev.EventID, ev.At.UTC()
			}
			out = append(out, r)
			return nil
		})
	})
	return out
}

// stored is what RAW holds of one source.
type stored struct {
	msgs     int               // its messages, heartbeats included
	ids      map[string]bool   // its events
	progress map[int]time.Time // the largest event time of its events, by partition, in ms
	last     time.Time         // the broker time of its last message
}

func storedOf(raw []rawMsg, id string) stored {
	s := stored{ids: map[string]bool{}, progress: map[int]time.Time{}}
	for _, r := range raw {
		if r.source != id {
			continue
		}
		s.msgs++
		s.last = r.stamp
		if r.heartbeat {
			continue
		}
		s.ids[r.eventID] = true
		// Progress is kept in whole milliseconds (docs/spec.md §3.1).
		if at := r.at.Truncate(time.Millisecond); at.After(s.progress[r.partition]) {
			s.progress[r.partition] = at
		}
	}
	return s
}

// killMidFile starts L (idle), then F; once F's first records are in RAW
// (F is a source of its partitions before any heartbeat of L's reaches
// them) L's feed starts, and once RAW holds killAt of F's file, with L
// sending beside it, F is SIGKILLed. It fails unless RAW then holds
// between killLow and killHigh of F's file. L is left sending.
func (d *deployment) killMidFile(ctx context.Context, admin *connect.Conn, in *fileAndFeed) (*trickle, stored) {
	t := d.t
	t.Helper()
	base, err := rawStored(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	l := d.startSource(ctx, "source-live", "--heartbeat-interval", feedBeat)
	feed := l.feedSlowly(ctx, in.feed, feedEvery)
	began := time.Now()
	f := d.startFileSource(ctx, "source-file", "--events", in.path)
	untilFile := func(n uint64, what string, feeding int) {
		for {
			got, err := rawStored(ctx, admin)
			if err == nil && got >= base+n && feed.sent() >= feeding {
				return
			}
			if f.exited() {
				t.Fatalf("F exited (%v) before RAW held %d of its %d events (%s; RAW holds %d): F is too fast to be killed mid-file here\n%s",
					f.err, n, len(in.file), what, got-base, f.logTail())
			}
			if ctx.Err() != nil {
				t.Fatalf("RAW never held %d of F's events: %v", n, ctx.Err())
			}
			time.Sleep(probeEvery)
		}
	}
	untilFile(1, "its first records", 0)
	feed.allow(len(in.feed))
	untilFile(uint64(killAt*float64(len(in.file))), "the kill point, with L writing", 3)
	sentBefore := feed.sent()
	f.kill()
	killed := time.Now()
	var exit *exec.ExitError
	if !errors.As(f.err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("F was not killed by SIGKILL (it ended with %v): it must die mid-file\n%s", f.err, f.logTail())
	}
	raw := readRAW(t, ctx, admin)
	fs := storedOf(raw, in.fileID)
	// Side by side: L's first event is in RAW before F's last message.
	var firstL, lastF uint64
	for _, r := range raw {
		switch {
		case r.source == in.fileID:
			lastF = r.seq
		case firstL == 0 && !r.heartbeat && strings.HasSuffix(r.source, "/source-live.ndjson"):
			firstL = r.seq
		}
	}
	if firstL == 0 || firstL > lastF {
		t.Fatalf("L's first event is at RAW seq %d, F's last message at %d: L was not sending beside F when F was killed", firstL, lastF)
	}
	share := float64(len(fs.ids)) / float64(len(in.file))
	t.Logf("F killed %s after it started, with %d of its %d events (%.0f%%) and %d messages in RAW; L had written %d events by then",
		killed.Sub(began).Round(time.Millisecond), len(fs.ids), len(in.file), 100*share, fs.msgs, sentBefore)
	if share < killLow || share > killHigh {
		t.Fatalf("F was killed with %.0f%% of its file in RAW, not mid-file (%.0f%%–%.0f%%)", 100*share, 100*killLow, 100*killHigh)
	}
	for _, p := range fileParts() {
		if fs.progress[p].IsZero() {
			t.Fatalf("F has no event in RAW in its partition %d", p)
		}
	}
	return feed, fs
}

// settled reads again what RAW holds of source id, seconds after its
// kill (a batch it sent just before dying may have been stored after
// killMidFile read RAW), and logs any difference from before.
func settled(t *testing.T, ctx context.Context, admin *connect.Conn, id string, before stored) stored {
	t.Helper()
	now := storedOf(readRAW(t, ctx, admin), id)
	if now.msgs != before.msgs {
		t.Logf("RAW holds %d messages of F's now, %d right after the kill", now.msgs, before.msgs)
	}
	return now
}

// status is the output of `receiptctl status`.
func (d *deployment) status(ctx context.Context) string {
	d.t.Helper()
	out, err := exec.CommandContext(ctx, filepath.Join(binaries(d.t), "receiptctl"), "status", "--nats-url", d.natsURL).CombinedOutput()
	if err != nil {
		d.t.Fatalf("receiptctl status: %v\n%s", err, out)
	}
	return string(out)
}

func since(t time.Time) time.Duration { return time.Since(t).Round(100 * time.Millisecond) }

// readHealth reads the publisher's meta.health.
func readHealth(ctx context.Context, admin *connect.Conn) (*wire.Health, error) {
	kv, err := admin.JS.KeyValue(ctx, wire.For("").Bucket())
	if err != nil {
		return nil, err
	}
	e, err := kv.Get(ctx, wire.HealthKey)
	if err != nil {
		return nil, err
	}
	var h wire.Health
	if err := json.Unmarshal(e.Value(), &h); err != nil {
		return nil, err
	}
	return &h, nil
}

// sourceIn returns what h says partition p knows of the source whose id
// is id (or ends with "/"+id when suffix); ok false when none.
func sourceIn(h *wire.Health, p int, id string, suffix bool) (wire.SourceState, bool) {
	for _, ps := range h.Sources {
		if ps.Partition != p {
			continue
		}
		for _, s := range ps.Sources {
			if s.ID == id || (suffix && strings.HasSuffix(s.ID, "/"+id)) {
				return s, true
			}
		}
	}
	return wire.SourceState{}, false
}

func watermarkOf(h *wire.Health, p int) time.Time {
	if p < len(h.Watermarks) {
		return h.Watermarks[p].UTC()
	}
	return time.Time{}
}

// rawParity runs the batch pass over RAW as stored (reconcile.CountRaw:
// RAW order, source ids, heartbeats and broker timestamps; the referee's
// own watermarks) with the deployment's recorded parameters, and compares
// it with windows and late.
func rawParity(t *testing.T, ctx context.Context, admin *connect.Conn, windows []wire.Window, late []reconcile.LateRow) (*reconcile.Report, *reconcile.Batch) {
	t.Helper()
	meta, err := config.Recorded(ctx, admin.JS)
	if err != nil {
		t.Fatal(err)
	}
	p := config.Defaults()
	if _, err := p.Adopt(meta, wire.For("").Generation, func(string) bool { return false }); err != nil {
		t.Fatal(err)
	}
	v, err := contract.NewValidator(p.Contract())
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := reconcile.CountRaw(ctx, admin.JS, wire.For("").Stream(wire.Raw), reconcile.Config{
		Validator: v, DefaultIngestedAt: time.Now().UTC(), Partitions: p.Partitions, HotKeys: p.Hot(),
		Lateness: p.Lateness, Grace: p.Grace, Horizon: p.ReplayHorizon, SourceIdle: p.SourceIdle,
	})
	if err != nil {
		t.Fatal(err)
	}
	return reconcile.Compare(b, windows, late), b
}

func logParity(t *testing.T, what string, rep *reconcile.Report) {
	t.Helper()
	if rep.Holds {
		t.Logf("%s: parity holds (%d final windows, %d matched, %d explained)", what, rep.Summary.Final, rep.Summary.Matched, rep.Summary.Explained)
		return
	}
	t.Errorf("%s: parity does not hold: %d unexplained differences over %d final windows", what, len(rep.Unexplained), rep.Summary.Final)
	for i, u := range rep.Unexplained {
		if i == 10 {
			t.Errorf("  … %d more", len(rep.Unexplained)-10)
			break
		}
		t.Errorf("  %s %s %s: %s", u.WindowID, u.Kind, u.EventID, u.Detail)
	}
}

// TestSourceKilledAndRerunUnderItsID: F is SIGKILLed mid-file beside
// L's live feed; L goes on for a few seconds (its heartbeats must not
// move F's partitions: F is still live there, within --source-idle);
// F's same command line then runs the file again (the same default
// source id), L finishes, --end-of-stream. Every window equals the
// single-source run of all events in event-time order, nothing is late,
// and reconcile holds.
func TestSourceKilledAndRerunUnderItsID(t *testing.T) {
	began := time.Now()
	in := newFileAndFeed(t)

	cleanCtx, cancelClean := context.WithTimeout(context.Background(), 3*time.Minute)
	want, err := boundedrun.Run(cleanCtx, boundedrun.Config{Config: pipeline.Config{DataDir: t.TempDir()}, Events: in.byTime})
	cancelClean()
	if err != nil {
		t.Fatalf("single-source run: %v", err)
	}
	if !want.Report.Holds || len(want.Late) != 0 {
		t.Fatalf("single-source run: parity holds %v, %d late events; want parity and none late", want.Report.Holds, len(want.Late))
	}
	t.Logf("single-source run: %d windows in %s", len(want.Windows), want.Elapsed.Round(100*time.Millisecond))

	d := deployWith(t, setup{broker: true})
	ctx, cancel := context.WithTimeout(context.Background(), killSourcesTimeout)
	defer cancel()
	admin := d.admin(ctx)
	t.Logf("%s: deployment up", since(began))

	feed, fs := d.killMidFile(ctx, admin, in)

	// L goes on for a few seconds with F dead, then holds still.
	feed.untilSent(ctx, feed.sent()+int(3*time.Second/feedEvery))
	n := feed.hold(ctx)
	lastL := in.feed[n-1].at.Truncate(time.Millisecond)
	fs = settled(t, ctx, admin, in.fileID, fs)
	// Once the windower has applied L's last heartbeat in F's partitions
	// (the publisher reports L there with that progress), F must still be
	// live in each with its own progress, and the watermark no further
	// than F's progress less the lateness.
	testenv.CheckFor(t, time.Minute, 200*time.Millisecond, func() error {
		h, err := readHealth(ctx, admin)
		if err != nil {
			return err
		}
		for _, p := range fileParts() {
			if s, ok := sourceIn(h, p, "source-live.ndjson", true); !ok || !s.Progress.Equal(lastL) {
				return fmt.Errorf("partition %d: L not reported with progress %s yet (%+v)", p, lastL.Format(time.RFC3339), s)
			}
		}
		return nil
	})
	h, err := readHealth(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range fileParts() {
		s, ok := sourceIn(h, p, in.fileID, false)
		wm := watermarkOf(h, p)
		t.Logf("partition %d with F dead for %s and L at %s: watermark %s, F %+v", p, time.Since(fs.last).Round(time.Millisecond),
			lastL.Format(time.RFC3339), wm.Format(time.RFC3339), s)
		if !ok || !s.Live {
			t.Errorf("partition %d: F (killed %s ago, within --source-idle 2m) is not a live source there: %+v", p, time.Since(fs.last).Round(time.Second), s)
		}
		if ok && !s.Progress.Equal(fs.progress[p]) {
			t.Errorf("partition %d: F's progress %s; RAW's largest event time of F there is %s", p, s.Progress.Format(time.RFC3339), fs.progress[p].Format(time.RFC3339))
		}
		if limit := fs.progress[p].Add(-window.DefaultLateness); wm.After(limit) {
			t.Errorf("partition %d: watermark %s is past F's progress less the lateness (%s): L's heartbeats moved a partition F still holds",
				p, wm.Format(time.RFC3339), limit.Format(time.RFC3339))
		}
	}

	// The operator sees it too: receiptctl status lists F live, with L.
	d.requireStatus(ctx, in.fileID, "source-live.ndjson")

	// F's same command line again: it continues its source.
	rerun := d.startFileSource(ctx, "source-file-again", "--events", in.path)
	feed.allow(len(in.feed))
	rerun.wait()
	t.Logf("%s: F's re-run has exited 0", since(began))
	if dups := rerun.duplicates(); dups != fs.msgs {
		t.Errorf("the re-run reported %d records dropped by JetStream as duplicates; RAW held %d messages of F's (events and heartbeats) before it", dups, fs.msgs)
	}
	feed.finish(ctx, feedRest)
	t.Logf("%s: L has exited 0", since(began))
	d.endOfStream(ctx)
	windows, late := d.drainedWindows(ctx, admin)
	t.Logf("%s: drained after --end-of-stream", since(began))
	raw := readRAW(t, ctx, admin)
	if again := storedOf(raw, in.fileID); len(again.ids) != len(in.file) {
		t.Errorf("RAW holds %d of F's %d events under F's id", len(again.ids), len(in.file))
	}
	o := compareRuns(project(windows), project(want.Windows))
	t.Logf("%d of %d windows equal the single-source run's; %d rows in LATE", o.equal, o.windows, len(late))
	if len(o.diffs) > 0 {
		t.Errorf("%d of %d windows differ from the single-source run of the same events in event-time order: %d events short, %d beyond",
			len(o.diffs), o.windows, o.lost, o.double)
		for _, diff := range o.diffs {
			t.Errorf("%s", diff)
		}
	}
	for i, r := range late {
		if i == 5 {
			t.Errorf("  … %d more rows in LATE", len(late)-5)
			break
		}
		t.Errorf("LATE holds %s of window %s (%s, watermark %s, source %q): an in-order event judged late", r.EventID, r.WindowID, r.Reason, r.Watermark.Format(time.RFC3339), r.Source)
	}
	out, holds := d.reconcileDeployment(ctx, in.byTime, windows, late)
	if !holds {
		t.Errorf("receiptctl reconcile (the events in event-time order, the deployment's parameters) against the deployment: parity does not hold:\n%s", out)
	} else {
		t.Logf("receiptctl reconcile: %s", lastLine(out))
	}
	rep, _ := rawParity(t, ctx, admin, windows, late)
	logParity(t, "the batch pass over RAW as stored", rep)
	t.Logf("took %s", time.Since(began).Round(100*time.Millisecond))
}

// TestSourceKilledAndRerunUnderANewID: with --source-idle 5s, F is
// SIGKILLed mid-file and L keeps sending for longer than that: F's
// partitions move on to L's progress while F is dead. F's file then runs
// again under a new id (--source-id rerun-1). What RAW held of F before
// the kill is not stored again (JetStream duplicates) and counted once;
// the rest is judged against the moved watermark: counted (as a
// correction, within grace) or LATE (after grace). No event is counted
// twice, or both counted and late, and the batch pass over RAW agrees.
func TestSourceKilledAndRerunUnderANewID(t *testing.T) {
	began := time.Now()
	const idle = 5 * time.Second
	lateness, grace := window.DefaultLateness, window.DefaultGrace
	in := newFileAndFeed(t)

	d := deployWith(t, setup{broker: true, args: []string{"--source-idle", idle.String()}})
	ctx, cancel := context.WithTimeout(context.Background(), killSourcesTimeout)
	defer cancel()
	admin := d.admin(ctx)
	t.Logf("%s: deployment up", since(began))
	testenv.CheckFor(t, time.Minute, 100*time.Millisecond, func() error {
		meta, err := config.Recorded(ctx, admin.JS)
		if err != nil {
			return err
		}
		if got := meta[wire.For("").ParamKey("source-idle")]; got != idle.String() {
			return fmt.Errorf("RAW records --source-idle %q; want %s (the services' set-up)", got, idle)
		}
		return nil
	})

	feed, fs := d.killMidFile(ctx, admin, in)

	// L goes on; once --source-idle of broker time has passed in F's
	// partitions without F's progress growing, they move on to L's
	// progress.
	testenv.CheckFor(t, time.Minute, 100*time.Millisecond, func() error {
		feed.check()
		if feed.sent() == len(in.feed) {
			t.Fatalf("L wrote all its %d events before F's partitions moved on", len(in.feed))
		}
		h, err := readHealth(ctx, admin)
		if err != nil {
			return err
		}
		for _, p := range fileParts() {
			wm, limit := watermarkOf(h, p), fs.progress[p].Add(-lateness)
			s, _ := sourceIn(h, p, in.fileID, false)
			if !wm.After(limit) || s.Live {
				return fmt.Errorf("partition %d: watermark %s, F %+v: not moved on past F's progress less the lateness (%s)", p, wm.Format(time.RFC3339), s, limit.Format(time.RFC3339))
			}
		}
		return nil
	})
	movedAt := time.Now()
	fs = settled(t, ctx, admin, in.fileID, fs)
	t.Logf("F's partitions moved on %s after F's last message in RAW (--source-idle %s)", movedAt.Sub(fs.last).Round(time.Millisecond), idle)
	if movedAt.Before(fs.last.Add(idle)) {
		t.Errorf("F's partitions moved on %s after F's last message in RAW: before --source-idle %s had passed", movedAt.Sub(fs.last).Round(time.Millisecond), idle)
	}
	// receiptctl status no longer lists F among the live sources.
	testenv.CheckFor(t, 10*time.Second, 200*time.Millisecond, func() error {
		if out := d.status(ctx); strings.Contains(out, in.fileID) || !strings.Contains(out, "source-live.ndjson") {
			return fmt.Errorf("receiptctl status once F's partitions moved on: want L listed live and F not:\n%s", out)
		}
		return nil
	})

	// L holds still (its progress well into hour 13), and the watermark
	// F's events are judged against when they come again is fixed: W* of
	// each of F's partitions, L's progress less the lateness.
	feed.untilSent(ctx, 150)
	n := feed.hold(ctx)
	lastL := in.feed[n-1].at.Truncate(time.Millisecond)
	moved := map[int]time.Time{}
	testenv.CheckFor(t, time.Minute, 200*time.Millisecond, func() error {
		h, err := readHealth(ctx, admin)
		if err != nil {
			return err
		}
		for _, p := range fileParts() {
			s, ok := sourceIn(h, p, "source-live.ndjson", true)
			if wm := watermarkOf(h, p); !ok || !s.Progress.Equal(lastL) || !wm.Equal(lastL.Add(-lateness)) {
				return fmt.Errorf("partition %d: watermark %s, L %+v; want L's progress %s and the watermark that less the lateness", p, wm.Format(time.RFC3339), s, lastL.Format(time.RFC3339))
			}
			moved[p] = watermarkOf(h, p)
		}
		return nil
	})
	t.Logf("L held at %s after %d events: the watermark of F's partitions is %s", lastL.Format(time.RFC3339), n, moved[fileParts()[0]].Format(time.RFC3339))

	// F's file again, under a new id.
	rerun := d.startFileSource(ctx, "source-file-rerun-1", "--events", in.path, "--source-id", "rerun-1")
	rerun.wait()
	t.Logf("%s: the re-run has exited 0", since(began))
	dups := rerun.duplicates()
	feed.finish(ctx, feedRest)
	t.Logf("%s: L has exited 0", since(began))
	d.endOfStream(ctx)
	windows, late := d.drainedWindows(ctx, admin)
	t.Logf("%s: drained after --end-of-stream", since(began))
	raw := readRAW(t, ctx, admin)

	// RAW: each of F's events once, under F's id (stored before the kill)
	// or rerun-1's (the rest).
	first, again := storedOf(raw, in.fileID), storedOf(raw, "rerun-1")
	if len(first.ids) != len(fs.ids) {
		t.Errorf("RAW holds %d events under F's id now, %d before the re-run", len(first.ids), len(fs.ids))
	}
	if dups != len(fs.ids) {
		t.Errorf("the re-run reported %d records dropped by JetStream as duplicates; RAW held %d events of F's before it", dups, len(fs.ids))
	}
	seen := map[string]int{}
	for _, r := range raw {
		if !r.heartbeat {
			seen[r.eventID]++
		}
	}
	for id, k := range seen {
		if k != 1 {
			t.Errorf("RAW holds event %s %d times", id, k)
		}
	}

	// The expected outcome, event by event.
	type tally struct{ count, corrections, late, submissions int64 }
	wantW := map[string]*tally{}
	wantLate := map[string]reconcile.LateRow{}
	counted := map[string]map[string]bool{} // window → ids
	add := func(ev event, verdict string, p int) {
		var e struct {
			EventID string `json:"event_id"`
		}
		json.Unmarshal(ev.line, &e)
		id := ev.at.Truncate(time.Hour).Format("2006-01-02T15")
		w := wantW[id]
		if w == nil {
			w = &tally{}
			wantW[id] = w
			counted[id] = map[string]bool{}
		}
		w.submissions++
		switch verdict {
		case "on time", "correction":
			w.count++
			counted[id][e.EventID] = true
			if verdict == "correction" {
				w.corrections++
			}
		case "late":
			w.late++
			wantLate[e.EventID] = reconcile.LateRow{EventID: e.EventID, WindowID: id, Reason: wire.ReasonAfterGrace, Watermark: moved[p], Partition: p, Source: "rerun-1"}
		}
	}
	verdicts := map[string]int{}
	for _, ev := range in.feed {
		add(ev, "on time", window.Partition(liveStore, 8))
	}
	for _, ev := range in.file {
		var e struct {
			EventID      string `json:"event_id"`
			PartitionKey string `json:"partition_key"`
		}
		json.Unmarshal(ev.line, &e)
		p := window.Partition(e.PartitionKey, 8)
		verdict := "on time"
		if !first.ids[e.EventID] {
			if !again.ids[e.EventID] {
				t.Fatalf("F's event %s is in RAW under neither F's id nor rerun-1's", e.EventID)
			}
			end := ev.at.Truncate(time.Hour).Add(time.Hour)
			switch wm := moved[p]; {
			case wm.Before(end):
				verdict = "on time"
			case wm.Before(end.Add(grace)):
				verdict = "correction"
			default:
				verdict = "late"
			}
			verdicts[verdict]++
		}
		add(ev, verdict, p)
	}
	t.Logf("F's %d events stored only by the re-run, judged against the moved watermark: %v", len(again.ids), verdicts)
	if verdicts["late"] == 0 || verdicts["correction"] == 0 {
		t.Errorf("the re-run's events would be %v: the test wants some of each, corrections and LATE (F killed at %d of %d events)", verdicts, len(fs.ids), len(in.file))
	}

	var sumCount int64
	got := map[string]wire.Window{}
	for _, w := range windows {
		got[w.WindowID] = w
		sumCount += w.Count
		if wt := wantW[w.WindowID]; wt == nil {
			t.Errorf("window %s published (%s); no event of the test falls in it", w.WindowID, describe(w))
		}
	}
	ids := make([]string, 0, len(wantW))
	for id := range wantW {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		wt, w := wantW[id], got[id]
		t.Logf("window %s: %s; want count %d (corrections %d), late_dropped %d of %d submissions", id, describe(w), wt.count, wt.corrections, wt.late, wt.submissions)
		if w.Count+w.LateDropped > wt.submissions {
			t.Errorf("window %s: count %d + late_dropped %d exceeds its %d distinct submissions: events counted twice", id, w.Count, w.LateDropped, wt.submissions)
		}
		if w.Count != wt.count || w.Corrections != wt.corrections || w.LateDropped != wt.late || w.Status != window.StatusFinal {
			t.Errorf("window %s: %s; want count %d, corrections %d, late_dropped %d, status final", id, describe(w), wt.count, wt.corrections, wt.late)
		}
	}
	lateSeen := map[string]bool{}
	for _, r := range late {
		if lateSeen[r.EventID] {
			t.Errorf("LATE holds %s twice", r.EventID)
		}
		lateSeen[r.EventID] = true
		w, ok := wantLate[r.EventID]
		switch {
		case !ok:
			t.Errorf("LATE holds %s of window %s (%s, watermark %s, source %q); it should have been counted", r.EventID, r.WindowID, r.Reason, r.Watermark.Format(time.RFC3339), r.Source)
		case r.WindowID != w.WindowID || r.Reason != w.Reason || !r.Watermark.Equal(w.Watermark) || r.Partition != w.Partition || r.Source != w.Source:
			t.Errorf("LATE row %+v; want %+v (judged against the moved watermark)", r, w)
		}
		for wid, set := range counted {
			if set[r.EventID] {
				t.Errorf("event %s is in LATE and expected counted in window %s", r.EventID, wid)
			}
		}
	}
	for id := range wantLate {
		if !lateSeen[id] {
			t.Errorf("LATE lacks %s (behind the moved watermark past grace)", id)
		}
	}
	if total := int64(len(in.file) + len(in.feed)); sumCount+int64(len(lateSeen)) != total {
		t.Errorf("windows count %d and LATE holds %d distinct events: %d in all; %d distinct events were sent", sumCount, len(lateSeen), sumCount+int64(len(lateSeen)), total)
	}

	// receiptctl reconcile reads a file (--events) in file order as one
	// source; it has no mode reading the deployment's RAW stream, so the
	// referee here is the batch pass over RAW as stored (reconcile.CountRaw,
	// what `receiptctl rebuild` gates a switch on), with the deployment's
	// recorded parameters (--source-idle 5s among them).
	rep, batch := rawParity(t, ctx, admin, windows, late)
	logParity(t, "the batch pass over RAW as stored", rep)
	for _, id := range ids {
		bw := batch.Windows[id]
		if bw == nil {
			t.Errorf("the batch pass has no window %s", id)
			continue
		}
		if len(bw.IDs) != len(counted[id]) {
			t.Errorf("window %s: the batch pass counts %d events, the test expects %d", id, len(bw.IDs), len(counted[id]))
		}
		for _, ev := range bw.IDs {
			if !counted[id][ev] {
				t.Errorf("window %s: the batch pass counts %s, which the test expects in LATE", id, ev)
				break
			}
		}
	}
	t.Logf("took %s", time.Since(began).Round(100*time.Millisecond))
}
