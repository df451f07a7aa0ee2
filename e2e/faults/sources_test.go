package faults

// Several writers of RAW side by side (docs/spec.md §3.1): receiptctl
// ingest processes against one real deployment (nats-server,
// redis-server, validator, windowers, publisher as processes), each fed
// by the test at its own pace. One producer's heartbeats must not make
// another producer's in-order events late.
//
// Each source reads a named pipe of its own (--events PATH), not standard
// input: the test writes it line by line, keeps it open through a pause
// and closes it at the source's end, as it would stdin, but the sources
// keep distinct default source ids (host:PATH; with --events - every one
// of them would be host:-, one source). No --source-id is given.
//
// The events are of 2026-12-02, days before the run: the deployment's
// defaults keep them. Retention (7 days) is of the messages' age, and the
// replay horizon (24h) is of event time after a window is final, measured
// on the watermark, not the wall clock; so no flag is passed.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/boundedrun"
	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/pipeline"
	"github.com/receiptflow/receiptflow/pkg/reconcile"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// sourcesTimeout bounds each test of this file.
const sourcesTimeout = 4 * time.Minute

// event is one generated submission and its line.
type event struct {
	at   time.Time
	line []byte
}

// submissions returns n submitted events of store, ids prefix-0001 …, with
// event times spread evenly over [from, from+span), in time order.
func submissions(prefix, store string, from time.Time, span time.Duration, n int) []event {
	out := make([]event, n)
	for i := range out {
		at := from.Add(span * time.Duration(i) / time.Duration(n)).UTC()
		id := fmt.Sprintf("%s-%04d", prefix, i+1)
		b, _ := json.Marshal(map[string]any{
			"schema_version": 2, "event_id": id, "receipt_id": "r-" + id, "type": "submitted",
			"occurred_at": at.Format(time.RFC3339Nano), "partition_key": store, "producer_version": "sources-test/1",
		})
		out[i] = event{at: at, line: b}
	}
	return out
}

// writeByTime writes every event of all sources to a file in event-time
// order (stable: a tie keeps the order given): the single source a
// side-by-side run must equal.
func writeByTime(t *testing.T, path string, all ...[]event) {
	t.Helper()
	var evs []event
	for _, s := range all {
		evs = append(evs, s...)
	}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].at.Before(evs[j].at) })
	var buf bytes.Buffer
	for _, e := range evs {
		buf.Write(e.line)
		buf.WriteByte('\n')
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// source is one `receiptctl ingest --nats-url … --events FIFO` process
// whose input the test writes.
type source struct {
	t    *testing.T
	name string
	log  string
	cmd  *exec.Cmd
	in   *os.File // the write end of the named pipe
	done chan struct{}
	err  error // cmd.Wait's, once done is closed
}

// startSource starts receiptctl ingest on a named pipe of its own (with
// args after its own, such as --heartbeat-interval) and opens the pipe for
// writing.
func (d *deployment) startSource(ctx context.Context, name string, args ...string) *source {
	t := d.t
	t.Helper()
	fifo := filepath.Join(t.TempDir(), name+".ndjson")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	s := &source{t: t, name: name, log: filepath.Join(logDir(t), name+".log"), done: make(chan struct{})}
	logf, err := os.Create(s.log)
	if err != nil {
		t.Fatal(err)
	}
	s.cmd = exec.CommandContext(ctx, filepath.Join(binaries(t), "receiptctl"), append([]string{"ingest", "--nats-url", d.natsURL, "--events", fifo}, args...)...)
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
		if s.in != nil {
			s.in.Close()
		}
		select {
		case <-s.done:
		default:
			s.cmd.Process.Kill()
			<-s.done
		}
	})
	// Opening the write end without blocking fails (ENXIO) until ingest
	// has opened the read end.
	for {
		f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		if err == nil {
			s.in = f
			return s
		}
		if !errors.Is(err, syscall.ENXIO) {
			t.Fatalf("%s: open %s: %v", name, fifo, err)
		}
		select {
		case <-s.done:
			t.Fatalf("%s exited before reading its input: %v\n%s", name, s.err, s.logTail())
		case <-ctx.Done():
			t.Fatalf("%s: %v before it opened its input", name, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// send writes evs one line each, every apart (0: all at once).
func (s *source) send(ctx context.Context, evs []event, every time.Duration) {
	s.t.Helper()
	if every <= 0 {
		s.write(joinLines(evs))
		return
	}
	for i, e := range evs {
		if i > 0 {
			pause(ctx, every)
		}
		s.write(append(append([]byte(nil), e.line...), '\n'))
	}
}

// feed writes evs and closes the input from a goroutine of its own (a
// producer writing its file at full speed); the channel gets the error.
func (s *source) feed(evs []event) <-chan error {
	errc := make(chan error, 1)
	go func() {
		_, err := s.in.Write(joinLines(evs))
		if cerr := s.in.Close(); err == nil {
			err = cerr
		}
		errc <- err
	}()
	return errc
}

func (s *source) write(b []byte) {
	s.t.Helper()
	if _, err := s.in.Write(b); err != nil {
		s.t.Fatalf("%s: writing its input: %v\n%s", s.name, err, s.logTail())
	}
}

// finish closes the input (the end of the source's file) and waits for
// ingest to exit 0.
func (s *source) finish() {
	s.t.Helper()
	if err := s.in.Close(); err != nil {
		s.t.Fatal(err)
	}
	s.wait()
}

// wait waits for ingest to exit and fails the test unless it exited 0.
func (s *source) wait() {
	s.t.Helper()
	<-s.done
	if s.err != nil {
		s.t.Fatalf("%s: receiptctl ingest: %v\n%s", s.name, s.err, s.logTail())
	}
}

func (s *source) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

func (s *source) logTail() string {
	b, _ := os.ReadFile(s.log)
	return tailOf(b, 3000)
}

// pause sleeps for d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// untilStored waits until RAW holds at least n messages.
func untilStored(t *testing.T, ctx context.Context, admin *connect.Conn, n uint64) {
	t.Helper()
	for {
		if got, err := rawStored(ctx, admin); err == nil && got >= n {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("RAW never held %d messages: %v", n, ctx.Err())
		}
		time.Sleep(probeEvery)
	}
}

// drainedWindows waits until the services have processed everything in
// the streams and returns the published windows and LATE's rows.
func (d *deployment) drainedWindows(ctx context.Context, admin *connect.Conn) ([]wire.Window, []reconcile.LateRow) {
	t := d.t
	t.Helper()
	names := wire.For("")
	services := []string{pipeline.Validator, pipeline.Windower, pipeline.Publisher}
	if err := pipeline.WaitDrained(ctx, admin.JS, names, services, 8); err != nil {
		b, _, berr := pipeline.Backlog(context.Background(), admin.JS, names, services, 8)
		t.Fatalf("pipeline did not drain: %v (backlog %v %v)", err, b, berr)
	}
	var windows []wire.Window
	var late []reconcile.LateRow
	readAgain(t, "KV windows", func() (err error) { windows, err = pipeline.ReadWindows(ctx, admin.JS, names); return err })
	readAgain(t, "LATE", func() (err error) { late, err = pipeline.ReadLate(ctx, admin.JS, names); return err })
	return windows, late
}

// windowOf returns window id of ws (the zero Window with an empty id when
// it was not published).
func windowOf(ws []wire.Window, id string) wire.Window {
	for _, w := range ws {
		if w.WindowID == id {
			return w
		}
	}
	return wire.Window{}
}

func describe(w wire.Window) string {
	if w.WindowID == "" {
		return "not published"
	}
	return fmt.Sprintf("count %d, late_dropped %d, corrections %d, status %s, version %d, watermark %s",
		w.Count, w.LateDropped, w.Corrections, w.Status, w.Version, w.Watermark.Format(time.RFC3339))
}

// endOfStream runs a third receiptctl ingest, of an empty file, with
// --end-of-stream: the operator's statement that no more data comes.
func (d *deployment) endOfStream(ctx context.Context) {
	t := d.t
	t.Helper()
	empty := filepath.Join(t.TempDir(), "empty.ndjson")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	d.startIngestArgs(ctx, "--events", empty, "--end-of-stream").wait()
}

// reconcileDeployment runs `receiptctl reconcile` with the deployment's
// recorded parameters (--nats-url) over byTime, the events in event-time
// order, and over the deployment's RAW stream (--raw), against the windows
// and late rows the deployment published. It returns the output and
// whether parity holds in both (exit 0).
func (d *deployment) reconcileDeployment(ctx context.Context, byTime string, windows []wire.Window, late []reconcile.LateRow) (string, bool) {
	t := d.t
	t.Helper()
	dir := t.TempDir()
	wb, err := json.Marshal(windows)
	if err != nil {
		t.Fatal(err)
	}
	var lb bytes.Buffer
	for _, r := range late {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		lb.Write(b)
		lb.WriteByte('\n')
	}
	wpath, lpath := filepath.Join(dir, "windows.json"), filepath.Join(dir, "late.ndjson")
	if err := os.WriteFile(wpath, wb, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lpath, lb.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	// Over the events in event-time order, and over RAW as stored (every
	// source judged by its own records and heartbeats): both must hold.
	var outs []string
	holds := true
	for _, input := range [][]string{{"--events", byTime}, {"--raw"}} {
		args := append([]string{"reconcile", "--nats-url", d.natsURL, "--windows", wpath, "--late", lpath}, input...)
		out, err := exec.CommandContext(ctx, filepath.Join(binaries(t), "receiptctl"), args...).CombinedOutput()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatalf("receiptctl %v: %v\n%s", args, err, out)
		}
		outs = append(outs, fmt.Sprintf("receiptctl reconcile %s:\n%s", strings.Join(input, " "), out))
		holds = holds && err == nil
	}
	return strings.Join(outs, "\n"), holds
}

// requireStatus waits until `receiptctl status` prints every one of
// want (the publisher reports the sources once a second).
func (d *deployment) requireStatus(ctx context.Context, want ...string) {
	t := d.t
	t.Helper()
	testenv.CheckFor(t, 30*time.Second, 200*time.Millisecond, func() error {
		out, err := exec.CommandContext(ctx, filepath.Join(binaries(t), "receiptctl"), "status", "--nats-url", d.natsURL).CombinedOutput()
		if err != nil {
			return fmt.Errorf("receiptctl status: %v\n%s", err, out)
		}
		for _, w := range want {
			if !strings.Contains(string(out), w) {
				return fmt.Errorf("receiptctl status prints no %q:\n%s", w, out)
			}
		}
		return nil
	})
}

// requireDistinctPartitions fails the test unless every store is in a
// partition of its own (fnv1a32(partition_key) mod 8).
func requireDistinctPartitions(t *testing.T, stores ...string) {
	t.Helper()
	seen := map[int]string{}
	for _, s := range stores {
		p := window.Partition(s, 8)
		if other, ok := seen[p]; ok {
			t.Fatalf("stores %q and %q share partition %d: pick other keys", other, s, p)
		}
		seen[p] = s
	}
}

// TestTwoSourcesSideBySide: source B sends one store's hour 10 in order,
// pausing halfway; during the pause source A sends 2,500 events of
// another store's hour 12, with its heartbeats, and finishes. A's
// heartbeats must not move B's partition past B's own progress: window
// 2026-12-02T10 stays open while B still sends and ends with all 60
// events, final only after --end-of-stream.
func TestTwoSourcesSideBySide(t *testing.T) {
	began := time.Now()
	const id10, id12 = "2026-12-02T10", "2026-12-02T12"
	day := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	evB := submissions("b", "store-b", day.Add(10*time.Hour), time.Hour, 60)
	evA := submissions("a", "store-a", day.Add(12*time.Hour), time.Hour, 2500)
	requireDistinctPartitions(t, "store-a", "store-b")
	byTime := filepath.Join(t.TempDir(), "by-time.ndjson")
	writeByTime(t, byTime, evB, evA)

	d := deployWith(t, setup{broker: true})
	ctx, cancel := context.WithTimeout(context.Background(), sourcesTimeout)
	defer cancel()
	admin := d.admin(ctx)

	b := d.startSource(ctx, "source-b")
	b.send(ctx, evB[:30], 50*time.Millisecond)
	pausedAt := time.Now()
	untilStored(t, ctx, admin, 30) // B's first half is in RAW before anything of A's
	a := d.startSource(ctx, "source-a")
	a.send(ctx, evA, 0)
	a.finish()
	pause(ctx, time.Second-time.Since(pausedAt))

	windows, _ := d.drainedWindows(ctx, admin)
	w := windowOf(windows, id10)
	t.Logf("B paused after 30 events, A finished (%d events): window %s %s", len(evA), id10, describe(w))
	if w.Status == window.StatusFinal {
		t.Errorf("window %s is final while source B is still sending (paused, its input open): %s; "+
			"A's heartbeats closed B's partition", id10, describe(w))
	}
	if w.Count != 30 {
		t.Errorf("window %s while B pauses: %s; want count 30 (B's first half)", id10, describe(w))
	}
	// receiptctl status names B live in its partition (A has left).
	d.requireStatus(ctx, "sources: 1 live", "source-b.ndjson")

	b.send(ctx, evB[30:], 50*time.Millisecond)
	b.finish()
	windows, late := d.drainedWindows(ctx, admin)
	w = windowOf(windows, id10)
	t.Logf("B finished (60 events), before --end-of-stream: window %s %s; %d rows in LATE", id10, describe(w), len(late))
	if w.Count != 60 || w.LateDropped != 0 {
		t.Errorf("window %s after both sources finished: %s; want count 60, late_dropped 0 "+
			"(B's 60 events were sent in order; %d of them judged too late)", id10, describe(w), w.LateDropped)
	}
	if w.Status == window.StatusFinal {
		t.Errorf("window %s is final before --end-of-stream: a source that stops leaves and closes nothing (docs/spec.md §3.1)", id10)
	}

	d.requireStatus(ctx, "sources: 0 live")

	d.endOfStream(ctx)
	windows, late = d.drainedWindows(ctx, admin)
	w = windowOf(windows, id10)
	t.Logf("after --end-of-stream: window %s %s; window %s %s", id10, describe(w), id12, describe(windowOf(windows, id12)))
	if w.Count != 60 || w.LateDropped != 0 || w.Status != window.StatusFinal {
		t.Errorf("window %s after --end-of-stream: %s; want count 60, late_dropped 0, status final", id10, describe(w))
	}
	if w12 := windowOf(windows, id12); w12.Count != 2500 || w12.LateDropped != 0 || w12.Status != window.StatusFinal {
		t.Errorf("window %s after --end-of-stream: %s; want count 2500, late_dropped 0, status final", id12, describe(w12))
	}
	for i, r := range late {
		if i == 5 {
			t.Errorf("  … %d more rows in LATE", len(late)-5)
			break
		}
		t.Errorf("LATE holds %s of window %s (%s, watermark %s): an in-order event judged late", r.EventID, r.WindowID, r.Reason, r.Watermark.Format(time.RFC3339))
	}
	out, holds := d.reconcileDeployment(ctx, byTime, windows, late)
	if !holds {
		t.Errorf("receiptctl reconcile (the events in event-time order, the deployment's parameters) against the deployment: parity does not hold:\n%s", out)
	} else {
		t.Logf("receiptctl reconcile: %s", lastLine(out))
	}
	t.Logf("took %s", time.Since(began).Round(100*time.Millisecond))
}

// TestFiveSourcesOneBehind: a slow source sends one store's hour 11 in
// order with short pauses, live in its partition before four fast sources
// send 2,500 events each of hour 13 (each its own store) with their
// heartbeats. Every window must equal a single-source run of the same
// events in event-time order, and reconcile must hold.
func TestFiveSourcesOneBehind(t *testing.T) {
	began := time.Now()
	const id11 = "2026-12-02T11"
	day := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	slowStore := "store-slow"
	fastStores := []string{"store-fast-1", "store-fast-2", "store-fast-3", "store-fast-4"}
	requireDistinctPartitions(t, append([]string{slowStore}, fastStores...)...)
	slow := submissions("slow", slowStore, day.Add(11*time.Hour), time.Hour, 400)
	fast := make([][]event, len(fastStores))
	for i, s := range fastStores {
		// Each its own event times (offset by a fraction of a second):
		// sources with identical progress would send heartbeats with
		// identical Nats-Msg-Ids, and JetStream would keep only the
		// first source's.
		from := day.Add(13*time.Hour + time.Duration(i)*311*time.Millisecond)
		fast[i] = submissions(fmt.Sprintf("fast%d", i+1), s, from, time.Hour-time.Second, 2500)
	}
	byTime := filepath.Join(t.TempDir(), "by-time.ndjson")
	writeByTime(t, byTime, append([][]event{slow}, fast...)...)

	// The single-source run of the same events in event-time order, on
	// the embedded default (receiptctl run's pipeline).
	cleanCtx, cancelClean := context.WithTimeout(context.Background(), 3*time.Minute)
	dir := t.TempDir()
	want, err := boundedrun.Run(cleanCtx, boundedrun.Config{Config: pipeline.Config{DataDir: dir}, Events: byTime})
	cancelClean()
	if err != nil {
		t.Fatalf("single-source run: %v", err)
	}
	if !want.Report.Holds {
		t.Fatalf("single-source run: parity does not hold")
	}
	if w := windowOf(want.Windows, id11); w.Count != 400 {
		t.Fatalf("single-source run: window %s %s; want count 400", id11, describe(w))
	}
	t.Logf("single-source run: %d windows in %s", len(want.Windows), want.Elapsed.Round(100*time.Millisecond))

	d := deployWith(t, setup{broker: true})
	ctx, cancel := context.WithTimeout(context.Background(), sourcesTimeout)
	defer cancel()
	admin := d.admin(ctx)

	// The slow source: 50 events, 100 ms apart in chunks of 50 …
	const chunk = 50
	s := d.startSource(ctx, "source-slow")
	s.send(ctx, slow[:chunk], 2*time.Millisecond)
	untilStored(t, ctx, admin, chunk) // live in its partition before any heartbeat of the others
	srcs := make([]*source, len(fast))
	fed := make([]<-chan error, len(fast))
	for i := range fast {
		srcs[i] = d.startSource(ctx, fmt.Sprintf("source-fast-%d", i+1))
		fed[i] = srcs[i].feed(fast[i])
	}
	// … the rest while the fast sources send; the last chunk once they
	// have all finished, so that the slow source is still sending after
	// every heartbeat of theirs is in RAW.
	allExited := func() bool {
		for _, src := range srcs {
			if !src.exited() {
				return false
			}
		}
		return true
	}
	sentBefore := -1 // slow events written before the fast sources had all exited
	for from := chunk; from < len(slow)-chunk; from += chunk {
		pause(ctx, 100*time.Millisecond)
		if sentBefore < 0 && allExited() {
			sentBefore = from
		}
		s.send(ctx, slow[from:from+chunk], 2*time.Millisecond)
	}
	if sentBefore < 0 {
		sentBefore = len(slow) - chunk
	}
	t.Logf("the fast sources had all finished by the time the slow source had written %d of its events (its input still open)", sentBefore)
	for i, src := range srcs {
		if err := <-fed[i]; err != nil {
			t.Fatalf("%s: writing its input: %v\n%s", src.name, err, src.logTail())
		}
		src.wait()
	}
	pause(ctx, 100*time.Millisecond)
	s.send(ctx, slow[len(slow)-chunk:], 2*time.Millisecond)
	s.finish()

	d.endOfStream(ctx)
	windows, late := d.drainedWindows(ctx, admin)
	w := windowOf(windows, id11)
	t.Logf("after --end-of-stream: window %s %s; %d rows in LATE", id11, describe(w), len(late))
	if w.Count != 400 || w.LateDropped != 0 {
		t.Errorf("window %s: %s; want count 400, late_dropped 0: the slow source's in-order events were judged late (%d rows in LATE)",
			id11, describe(w), len(late))
	}
	o := compareRuns(project(windows), project(want.Windows))
	if len(o.diffs) > 0 {
		t.Errorf("%d of %d windows differ from the single-source run of the same events in event-time order: %d events short, %d beyond",
			len(o.diffs), o.windows, o.lost, o.double)
		for _, diff := range o.diffs {
			t.Errorf("%s", diff)
		}
	}
	if got, wantLate := lateIDs(late), lateIDs(want.Late); strings.Join(got, ",") != strings.Join(wantLate, ",") {
		t.Errorf("LATE holds %d events, the single-source run %d", len(got), len(wantLate))
	}
	out, holds := d.reconcileDeployment(ctx, byTime, windows, late)
	if !holds {
		t.Errorf("receiptctl reconcile (the events in event-time order, the deployment's parameters) against the deployment: parity does not hold:\n%s", out)
	} else {
		t.Logf("receiptctl reconcile: %s", lastLine(out))
	}
	t.Logf("took %s", time.Since(began).Round(100*time.Millisecond))
}

func joinLines(evs []event) []byte {
	var buf bytes.Buffer
	for _, e := range evs {
		buf.Write(e.line)
		buf.WriteByte('\n')
	}
	return buf.Bytes()
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndexByte(s, '\n')+1:]
}
