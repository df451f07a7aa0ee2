package faults

// The front door under faults (docs/spec.md §10; issue "The front door",
// Done when #1): 50 producers — half POSTing to /v1/events, half sending
// NATS requests to rf.submit — send a generated stream through two ingest
// service instances, with retries, while one instance is SIGKILLed and
// restarted by its supervisor, then nats-server, then the other instance.
// A producer sends the same request body again after a 503 (once
// Retry-After has passed), a time-out, a connection error or an answer that
// does not cover every record, until it gets a 200 covering every record.
// After --end-of-stream every final window must equal the clean run's,
// nothing may be counted twice, every answer must be true to RAW, and
// receiptctl reconcile must hold.
//
// What "the clean run" is here. Each ingest instance is one source of RAW
// (docs/spec.md §3.1), and each carries the records of every producer that
// reaches it: a source's progress is the largest event time it has sent,
// in any partition, and its heartbeats carry that progress to every
// partition. So the per-source rule protects an instance's order, not a
// producer's: if one producer ran hours of event time ahead of another,
// the instances' progress would move every partition's watermark past the
// slow producer's windows, and its in-order events would be corrections
// or too late — an outcome decided by the race between producers, which
// no single-source run reproduces. The producers therefore advance in
// event time together, one hour of event time (a phase) at a time: all 50
// send their records of hour h concurrently (each in its store's order,
// in requests of up to 50 records), and none starts hour h+1 before every
// one has a 200 for all of hour h. While hour h is sent no stored event is
// later than the end of hour h, so every watermark stays below the end of
// hour h less the lateness and every event of hour h is on time however
// the requests interleave, on both instances, through every kill; and the
// single-source run of the same records, phase by phase in the
// generator's order, judges each one the same way. That file (byPhase) is
// the clean run's input and reconcile's. (A request a producer gave up on
// may still reach RAW after its records were stored by the retry, during
// a later phase: JetStream drops them as duplicates of those, by their
// Nats-Msg-Id, and the ledger would if it did not.)
//
// The records come from the harness's traffic generator (as troubledSet),
// one store per producer (store-i is producer i's), with byte-identical
// retries (5%), invalid records of every reason (2%, conflicting
// duplicates among them: always a copy of an earlier record of the same
// store, so of the same producer and stored after it), schema v1 (30%),
// other types (10%) and disorder within the lateness (20%; a disordered
// event belongs to the phase of its own hour, so it may go back across an
// hour boundary). The generator's late submissions are left out: they are
// late relative to the newest event of any store (a global order the
// producers do not keep), or by a margin that assumes a single source.
// Late events of any kind are left out, too: a LATE row carries the
// watermark of its verdict, and with two instances interleaving that
// watermark depends on RAW's order, which `receiptctl reconcile` (a file
// read in file order as one source) cannot rebuild: in a trial with
// submissions 6 hours behind, every one was judged too late after grace
// for the same window by the stream, the clean run and reconcile, yet
// reconcile reported each as late_watermark_mismatch (the batch pass over
// RAW as stored, rawParity, held). So nothing here is late: every valid
// submission is counted, once.
//
// Measured on 2 cores shared with other fault tests: see frontDoorEvents.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/boundedrun"
	"github.com/receiptflow/receiptflow/pkg/config"
	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/frontdoor"
	"github.com/receiptflow/receiptflow/pkg/pipeline"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/traffic"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

const (
	// frontDoorEvents is the number of generated records: the issue's
	// 100,000. Measured on 2 cores shared with another helper's fault
	// tests, the test took 70–105 s in 7 runs (the clean run 6–12 s, the
	// sending 54–88 s, the drain after --end-of-stream under a second;
	// `go test` 1m15–1m58 with the build), so the count is not scaled
	// down.
	frontDoorEvents = 100_000
	// frontDoorHours of event time: one phase each, plus one for the
	// disordered events before the first hour.
	frontDoorHours = 24
	// frontDoorProducers send concurrently; even ones over HTTP, odd
	// ones over NATS. Producer i sends store-i's records.
	frontDoorProducers = 50
	// frontDoorRequest is the most records in one request.
	frontDoorRequest = 50
	// frontDoorIdle is the deployment's --source-idle: a killed instance
	// holds its partitions' watermarks no longer than that.
	frontDoorIdle = 5 * time.Second
	// frontDoorTimeout bounds the faulty run from deployment to verdict.
	frontDoorTimeout = 4 * time.Minute
	// The producers' time-outs: an HTTP request may wait for RAW for the
	// instances' --retry-for (10s) before its 503; a NATS request sent to
	// an instance that dies is never answered, so its producer gives up
	// sooner and sends it again (the instances share the queue group).
	httpRequestTimeout = 20 * time.Second
	natsRequestTimeout = 5 * time.Second
	// retryPause is a producer's pause after an error without Retry-After.
	retryPause = 200 * time.Millisecond
)

var frontDoorStart = time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)

// fdRecord is one record a producer sends.
type fdRecord struct {
	line []byte
	// id is the event id as far as it can be read (contract.PeekEventID).
	id       string
	producer int
	// original is the index of the earlier record this one repeats byte
	// for byte, or -1.
	original int
}

// frontDoorInput is the input of TestFrontDoorFaults.
type frontDoorInput struct {
	records []fdRecord
	// phases[h][p] are the indices of producer p's records of phase h,
	// in the order it sends them.
	phases [][][]int
	// byPhase is every record, phase by phase, in the generator's order
	// within a phase: the clean run's (single-source) input.
	byPhase string
	// submissions counts the distinct submitted events of each window:
	// count + late_dropped can never exceed it.
	submissions map[string]int64
	distinct    int // distinct lines
}

func newFrontDoorInput(t *testing.T) *frontDoorInput {
	t.Helper()
	cfg := traffic.Config{
		Seed: 53, Events: frontDoorEvents, Start: frontDoorStart, Hours: frontDoorHours, Stores: frontDoorProducers,
		DupRate: 0.05, DisorderRate: 0.2, InvalidRate: 0.02, V1Share: 0.3, OtherTypeShare: 0.1,
	}
	startMs := frontDoorStart.UnixMilli()
	hourMs := time.Hour.Milliseconds()
	spanMs := int64(frontDoorHours) * hourMs
	// phaseOf is 1 + the hour of ms since the start (0: the hour before,
	// which disorder can reach).
	phaseOf := func(ms int64) int {
		h := (ms - startMs + hourMs) / hourMs
		if h < 0 {
			t.Fatalf("event time %s is more than an hour before the start", time.UnixMilli(ms).UTC())
		}
		return int(h)
	}
	nPhases := frontDoorHours + 1
	in := &frontDoorInput{submissions: map[string]int64{}}
	global := make([][]int, nPhases) // per phase, in generator order
	firstOf := map[string]int{}      // line → index of its first copy
	seen := map[string]bool{}        // event ids of submissions counted in submissions
	i := 0
	_, err := traffic.Each(cfg, func(rec traffic.Record) error {
		base := startMs + spanMs*int64(i)/int64(frontDoorEvents)
		i++
		p, err := strconv.Atoi(strings.TrimPrefix(rec.PartitionKey, "store-"))
		if err != nil || p < 0 || p >= frontDoorProducers {
			return fmt.Errorf("record of partition key %q: not one of the producers' stores", rec.PartitionKey)
		}
		phase := phaseOf(base)
		if rec.Kind == traffic.KindNew {
			phase = phaseOf(rec.EventTime)
			if rec.Type == contract.TypeSubmitted && !seen[rec.EventID] {
				seen[rec.EventID] = true
				in.submissions[window.ID(rec.EventTime)]++
			}
		}
		fr := fdRecord{line: rec.Line, id: contract.PeekEventID(rec.Line), producer: p, original: -1}
		if j, ok := firstOf[string(rec.Line)]; ok {
			fr.original = j
		} else {
			firstOf[string(rec.Line)] = len(in.records)
		}
		in.records = append(in.records, fr)
		global[phase] = append(global[phase], len(in.records)-1)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	in.distinct = len(firstOf)
	in.phases = make([][][]int, nPhases)
	var buf bytes.Buffer
	for h, idx := range global {
		in.phases[h] = make([][]int, frontDoorProducers)
		for _, k := range idx {
			p := in.records[k].producer
			in.phases[h][p] = append(in.phases[h][p], k)
			buf.Write(in.records[k].line)
			buf.WriteByte('\n')
		}
	}
	in.byPhase = filepath.Join(t.TempDir(), "by-phase.ndjson")
	if err := os.WriteFile(in.byPhase, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return in
}

// fdSeen is one answer's word on one record.
type fdSeen struct {
	status string
	seq    uint64
	final  bool
}

// fdStats counts what the producers went through.
type fdStats struct {
	requests, attempts                       atomic.Int64
	unavailable, timeouts, connErrs, partial atomic.Int64
	answered, inflight                       atomic.Int64
	httpRequests, natsRequests               atomic.Int64
}

func (s *fdStats) retries() int64 {
	return s.unavailable.Load() + s.timeouts.Load() + s.connErrs.Load() + s.partial.Load()
}

func (s *fdStats) String() string {
	return fmt.Sprintf("%d requests (%d over HTTP, %d over NATS) in %d attempts: %d retries — %d answered 503, %d timed out, %d connection errors, %d answers not covering every record",
		s.requests.Load(), s.httpRequests.Load(), s.natsRequests.Load(), s.attempts.Load(), s.retries(),
		s.unavailable.Load(), s.timeouts.Load(), s.connErrs.Load(), s.partial.Load())
}

// frontDoorRun is the producers' side of TestFrontDoorFaults.
type frontDoorRun struct {
	t     *testing.T
	in    *frontDoorInput
	urls  []string // the instances' /v1/events
	nc    *nats.Conn
	httpc *http.Client
	stats fdStats

	// last is the index of a record answered 200 most recently.
	last atomic.Int64

	mu sync.Mutex
	// seen holds, per record, every answer that named it.
	seen     [][]fdSeen
	problems []string // answers that break the door's contract
}

func (fr *frontDoorRun) problem(format string, args ...any) {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	if len(fr.problems) < 50 {
		fr.problems = append(fr.problems, fmt.Sprintf(format, args...))
	}
}

// fdAnswer is the door's JSON answer.
type fdAnswer struct {
	Results    []frontdoor.Result `json:"results"`
	Stored     int                `json:"stored"`
	Duplicates int                `json:"duplicates"`
	Invalid    int                `json:"invalid"`
	Error      string             `json:"error"`
}

// producer sends its records of every phase, request after request.
type producer struct {
	fr   *frontDoorRun
	i    int
	http bool
	rr   int // the next instance of an HTTP producer
}

// sendPhase sends the producer's records of one phase in requests of up
// to frontDoorRequest records, each until it is answered 200 in full.
func (p *producer) sendPhase(ctx context.Context, idx []int) error {
	for len(idx) > 0 {
		n := min(len(idx), frontDoorRequest)
		if err := p.request(ctx, idx[:n]); err != nil {
			return err
		}
		idx = idx[n:]
	}
	return nil
}

// request sends one request body until a 200 covers every record.
func (p *producer) request(ctx context.Context, idx []int) error {
	fr := p.fr
	var body bytes.Buffer
	for _, k := range idx {
		body.Write(fr.in.records[k].line)
		body.WriteByte('\n')
	}
	fr.stats.requests.Add(1)
	if p.http {
		fr.stats.httpRequests.Add(1)
	} else {
		fr.stats.natsRequests.Add(1)
	}
	fr.stats.inflight.Add(1)
	defer fr.stats.inflight.Add(-1)
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("producer %d: a request of %d records not answered 200 after %d attempts: %w", p.i, len(idx), attempt-1, err)
		}
		fr.stats.attempts.Add(1)
		var code int
		var a fdAnswer
		var retryAfter time.Duration
		var err error
		if p.http {
			code, a, retryAfter, err = p.postHTTP(ctx, body.Bytes())
		} else {
			code, a, retryAfter, err = p.requestNATS(ctx, body.Bytes())
		}
		pause := retryPause
		switch {
		case err != nil && ctx.Err() != nil:
			continue
		case err != nil && isTimeout(err):
			fr.stats.timeouts.Add(1)
		case err != nil:
			fr.stats.connErrs.Add(1)
		case code == http.StatusServiceUnavailable:
			fr.stats.unavailable.Add(1)
			if retryAfter <= 0 {
				fr.problem("producer %d: a 503 without Retry-After: %s", p.i, a.Error)
			}
			pause = max(retryAfter, pause)
			fr.note(p.i, idx, a, false)
		case code == http.StatusOK:
			if fr.covers(p.i, idx, a) {
				fr.note(p.i, idx, a, true)
				fr.stats.answered.Add(int64(len(idx)))
				fr.last.Store(int64(idx[len(idx)-1]))
				return nil
			}
			fr.stats.partial.Add(1)
			fr.note(p.i, idx, a, false)
		default:
			// 400, 413, 415 …: nothing the producer can mend by sending
			// the same body again.
			return fmt.Errorf("producer %d: answered %d to a request of %d records: %s", p.i, code, len(idx), a.Error)
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || (errors.As(err, &ne) && ne.Timeout())
}

// postHTTP POSTs body to the next instance, round-robin: after a failure
// the next attempt goes to the other one.
func (p *producer) postHTTP(ctx context.Context, body []byte) (int, fdAnswer, time.Duration, error) {
	fr := p.fr
	url := fr.urls[p.rr%len(fr.urls)]
	p.rr++
	rctx, cancel := context.WithTimeout(ctx, httpRequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, fdAnswer{}, 0, err
	}
	req.Header.Set("Content-Type", frontdoor.TypeNDJSON)
	resp, err := fr.httpc.Do(req)
	if err != nil {
		return 0, fdAnswer{}, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, fdAnswer{}, 0, err
	}
	var a fdAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		return 0, fdAnswer{}, 0, fmt.Errorf("answer %d is not JSON (%v): %.200s", resp.StatusCode, err, b)
	}
	return resp.StatusCode, a, retryAfterOf(resp.Header.Get("Retry-After")), nil
}

// requestNATS sends body as a request to rf.submit (the instances' queue
// group picks one).
func (p *producer) requestNATS(ctx context.Context, body []byte) (int, fdAnswer, time.Duration, error) {
	rctx, cancel := context.WithTimeout(ctx, natsRequestTimeout)
	defer cancel()
	m := nats.NewMsg(frontdoor.Subject)
	m.Data = body
	m.Header.Set("Content-Type", frontdoor.TypeNDJSON)
	resp, err := p.fr.nc.RequestMsgWithContext(rctx, m)
	if err != nil {
		return 0, fdAnswer{}, 0, err
	}
	code, err := strconv.Atoi(resp.Header.Get(frontdoor.HdrStatus))
	if err != nil {
		return 0, fdAnswer{}, 0, fmt.Errorf("a NATS answer without a status (%s %q): %.200s", frontdoor.HdrStatus, resp.Header.Get(frontdoor.HdrStatus), resp.Data)
	}
	var a fdAnswer
	if err := json.Unmarshal(resp.Data, &a); err != nil {
		return 0, fdAnswer{}, 0, fmt.Errorf("answer %d is not JSON (%v): %.200s", code, err, resp.Data)
	}
	return code, a, retryAfterOf(resp.Header.Get("Retry-After")), nil
}

func retryAfterOf(v string) time.Duration {
	s, err := strconv.Atoi(v)
	if err != nil || s < 0 {
		return 0
	}
	return time.Duration(s) * time.Second
}

// covers reports whether a 200 answers every record of the request, in
// order; one that answers some but names them wrongly is a problem too.
func (fr *frontDoorRun) covers(producer int, idx []int, a fdAnswer) bool {
	if len(a.Results) != len(idx) {
		return false
	}
	for j, res := range a.Results {
		switch res.Status {
		case frontdoor.StatusStored, frontdoor.StatusDuplicate, frontdoor.StatusInvalid:
		default:
			return false
		}
		if want := fr.in.records[idx[j]].id; want != "" && res.EventID != want {
			fr.problem("producer %d: a 200's result %d names event %q, the record is %q", producer, j, res.EventID, want)
			return false
		}
	}
	if a.Stored+a.Duplicates+a.Invalid != len(idx) {
		fr.problem("producer %d: a 200 of %d records totals stored %d + duplicates %d + invalid %d", producer, len(idx), a.Stored, a.Duplicates, a.Invalid)
	}
	return true
}

// note books what an answer says of each record it names: a 200 names
// every record in order; a 503 (or an answer not covering the request)
// names some, in order, each by its event id.
func (fr *frontDoorRun) note(producer int, idx []int, a fdAnswer, final bool) {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	if final {
		for j, res := range a.Results {
			k := idx[j]
			fr.seen[k] = append(fr.seen[k], fdSeen{status: res.Status, seq: res.Seq, final: true})
		}
		return
	}
	j := 0
	for _, res := range a.Results {
		for j < len(idx) && fr.in.records[idx[j]].id != res.EventID {
			j++
		}
		if j == len(idx) {
			if len(fr.problems) < 50 {
				fr.problems = append(fr.problems, fmt.Sprintf("producer %d: an answer names event %q (%s, seq %d), not a record of the request or out of order: %s",
					producer, res.EventID, res.Status, res.Seq, a.Error))
			}
			return
		}
		k := idx[j]
		fr.seen[k] = append(fr.seen[k], fdSeen{status: res.Status, seq: res.Seq})
		j++
	}
}

// lastAnswered returns the line of a record answered 200 a moment ago:
// sent again now, it can only be a duplicate (JetStream's duplicate
// window is 2m), so a probe made of it changes nothing in RAW.
func (fr *frontDoorRun) lastAnswered() []byte {
	return fr.in.records[fr.last.Load()].line
}

// outageAnswers counts one instance's answers to the outage probe.
type outageAnswers struct {
	unavailable, noRetryAfter, other, errs int
	codes                                  map[int]int
}

func (o outageAnswers) String() string {
	return fmt.Sprintf("%d answered 503, %d other answers %v, %d requests failed", o.unavailable, o.other, o.codes, o.errs)
}

// probeOutage POSTs rec to each instance every 100ms until ctx ends and
// counts the answers.
func (fr *frontDoorRun) probeOutage(ctx context.Context, rec []byte) []outageAnswers {
	out := make([]outageAnswers, len(fr.urls))
	var wg sync.WaitGroup
	for i, url := range fr.urls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := &out[i]
			o.codes = map[int]int{}
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(append(append([]byte(nil), rec...), '\n')))
				req.Header.Set("Content-Type", frontdoor.TypeNDJSON)
				resp, err := fr.httpc.Do(req)
				switch {
				case err != nil && ctx.Err() != nil:
				case err != nil:
					o.errs++
				default:
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode == http.StatusServiceUnavailable {
						o.unavailable++
						if retryAfterOf(resp.Header.Get("Retry-After")) <= 0 {
							o.noRetryAfter++
						}
					} else {
						o.other++
						o.codes[resp.StatusCode]++
					}
				}
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
			}
		}()
	}
	wg.Wait()
	return out
}

// TestFrontDoorFaults: see the top of this file.
func TestFrontDoorFaults(t *testing.T) {
	began := time.Now()
	in := newFrontDoorInput(t)
	t.Logf("%d records (%d distinct) over %d phases from %d producers", len(in.records), in.distinct, len(in.phases), frontDoorProducers)

	// The single-source run of the same records, phase by phase.
	cleanCtx, cancelClean := context.WithTimeout(context.Background(), 3*time.Minute)
	want, err := boundedrun.Run(cleanCtx, boundedrun.Config{Config: pipeline.Config{DataDir: t.TempDir()}, Events: in.byPhase, Now: ingestNow})
	cancelClean()
	if err != nil {
		t.Fatalf("single-source run: %v", err)
	}
	if !want.Report.Holds {
		t.Fatalf("single-source run: parity does not hold")
	}
	if len(want.Late) != 0 {
		t.Fatalf("single-source run: %d events in LATE; the input is made to have none late", len(want.Late))
	}
	t.Logf("single-source run: %d windows, %d late, in %s", len(want.Windows), len(want.Late), want.Elapsed.Round(100*time.Millisecond))

	d := deployWith(t, setup{broker: true, args: []string{"--source-idle", frontDoorIdle.String()}})
	ctx, cancel := context.WithTimeout(context.Background(), frontDoorTimeout)
	defer cancel()
	admin := d.admin(ctx)
	testenv.CheckFor(t, time.Minute, 100*time.Millisecond, func() error {
		meta, err := config.Recorded(ctx, admin.JS)
		if err != nil {
			return err
		}
		if got := meta[wire.For("").ParamKey("source-idle")]; got != frontDoorIdle.String() {
			return fmt.Errorf("RAW records --source-idle %q; want %s (the services' set-up)", got, frontDoorIdle)
		}
		return nil
	})

	// Two instances, each a source of RAW under an id of its own that a
	// restart keeps.
	var doors []*proc
	var urls []string
	for _, id := range []string{"frontdoor-a", "frontdoor-b"} {
		listen := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
		probes := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
		doors = append(doors, startProc(t, binaries(t), "ingest", d.env, "--listen", listen, "--source-id", id,
			"--source-idle", frontDoorIdle.String(), "--http-addr", probes))
		urls = append(urls, "http://"+listen+frontdoor.Path)
	}
	for _, p := range doors {
		waitReady(t, ctx, p)
	}
	t.Logf("%s: deployment and both ingest instances up", since(began))

	nconn, err := connect.ConnectNATS(d.natsURL, "frontdoor-producers")
	if err != nil {
		t.Fatal(err)
	}
	defer nconn.Close()
	fr := &frontDoorRun{t: t, in: in, urls: urls, nc: nconn.NC, seen: make([][]fdSeen, len(in.records)),
		httpc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: frontDoorProducers, DisableCompression: true}}}
	defer fr.httpc.CloseIdleConnections()

	// The faults, each once the producers have had a share of the records
	// answered, and only while requests are in flight.
	r := chaosRand(t)
	type fault struct {
		name    string
		at      float64
		do      func() error
		retries int64 // retries before it
		when    time.Duration
	}
	var outage []outageAnswers // the probe's, per instance
	faults := []*fault{
		{name: "SIGKILL ingest frontdoor-a", at: 0.2, do: func() error { doors[0].kill(); return nil }},
		{name: "SIGKILL nats-server", at: 0.45, do: func() error {
			// The producers are nearly always waiting for an answer, so
			// the outage reaches them as requests held until RAW is back
			// (or timed out, on NATS). A probe shows the door's answer to
			// a request that comes while it has no connection.
			rec := fr.lastAnswered()
			d.nats.Kill()
			probeCtx, stopProbe := context.WithCancel(ctx)
			probed := make(chan []outageAnswers, 1)
			go func() { probed <- fr.probeOutage(probeCtx, rec) }()
			time.Sleep(500*time.Millisecond + time.Duration(r.IntN(1000))*time.Millisecond)
			err := d.nats.RestartErr()
			stopProbe()
			outage = <-probed
			return err
		}},
		{name: "SIGKILL ingest frontdoor-b", at: 0.7, do: func() error { doors[1].kill(); return nil }},
	}
	total := int64(len(in.records))
	faultCtx, stopFaults := context.WithCancel(ctx)
	faultsDone := make(chan error, 1)
	go func() {
		for _, f := range faults {
			at := int64((f.at + (r.Float64()-0.5)*0.06) * float64(total))
			for fr.stats.answered.Load() < at || fr.stats.inflight.Load() < 5 {
				if faultCtx.Err() != nil {
					faultsDone <- fmt.Errorf("%s: not done, the producers finished first (%d of %d records answered)", f.name, fr.stats.answered.Load(), total)
					return
				}
				time.Sleep(2 * time.Millisecond)
			}
			f.retries, f.when = fr.stats.retries(), time.Since(began)
			if err := f.do(); err != nil {
				faultsDone <- fmt.Errorf("%s: %w", f.name, err)
				return
			}
		}
		faultsDone <- nil
	}()

	sendBegan := time.Now()
	producers := make([]*producer, frontDoorProducers)
	for i := range producers {
		producers[i] = &producer{fr: fr, i: i, http: i%2 == 0, rr: i / 2}
	}
	took := make([]time.Duration, len(in.phases))
	for h, byProducer := range in.phases {
		phaseBegan := time.Now()
		var wg sync.WaitGroup
		errs := make([]error, len(producers))
		for i, p := range producers {
			if len(byProducer[i]) == 0 {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = p.sendPhase(ctx, byProducer[i])
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			stopFaults()
			t.Fatalf("phase %d: %v\n%s", h, err, fr.stats.String())
		}
		took[h] = time.Since(phaseBegan)
	}
	sent := time.Since(sendBegan)
	stopFaults()
	slow := make([]int, len(took))
	for h := range slow {
		slow[h] = h
	}
	sort.Slice(slow, func(i, j int) bool { return took[slow[i]] > took[slow[j]] })
	var slowest []string
	for _, h := range slow[:min(4, len(slow))] {
		slowest = append(slowest, fmt.Sprintf("phase %d %s", h, took[h].Round(10*time.Millisecond)))
	}
	t.Logf("the slowest phases: %s; the median %s", strings.Join(slowest, ", "), took[slow[len(slow)/2]].Round(10*time.Millisecond))
	faultErr := <-faultsDone
	t.Logf("%s: every producer has a 200 for every request, after %s of sending: %s", since(began), sent.Round(100*time.Millisecond), fr.stats.String())
	for i, f := range faults {
		next := fr.stats.retries()
		if i+1 < len(faults) && faults[i+1].when > 0 {
			next = faults[i+1].retries
		}
		if f.when > 0 {
			t.Logf("%s at %s: %d retries until the next fault", f.name, f.when.Round(100*time.Millisecond), next-f.retries)
		}
	}
	if faultErr != nil {
		t.Fatalf("the fault schedule: %v", faultErr)
	}
	for i, o := range outage {
		// A door whose client has not yet seen the connection drop takes
		// the request and holds it (up to its --retry-for) instead of
		// answering 503 at once, so a short outage may bring no 503 from
		// an instance; the 503 path itself is pkg/frontdoor's
		// TestUnavailableThenRetried. What is answered must be right.
		t.Logf("probing %s while nats-server was down: %s", urls[i], o)
		if o.noRetryAfter > 0 {
			t.Errorf("%s answered %d 503s without Retry-After while nats-server was down", urls[i], o.noRetryAfter)
		}
	}
	for _, p := range doors {
		if p.Restarts() != 1 {
			t.Logf("ingest (%v) was restarted %d times; killed once", p.args[1:], p.Restarts())
			if last := p.lastErrors(5); last != "" {
				t.Logf("its last errors:\n%s", last)
			}
		}
	}
	if fr.stats.retries() == 0 {
		t.Errorf("no request was retried: none of the faults hit a request in flight, so the run proves nothing")
	}
	d.logRestarts()

	// --end-of-stream, as sources_test.go's endOfStream sends it, but
	// logged to end-of-stream.log: startIngestArgs's ingest.log is the
	// first instance's log here.
	empty := filepath.Join(t.TempDir(), "empty.ndjson")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	d.startFileSource(ctx, "end-of-stream", "--events", empty, "--end-of-stream").wait()
	windows, late := d.drainedWindows(ctx, admin)
	t.Logf("%s: drained after --end-of-stream", since(began))

	// The answers, against RAW.
	fr.checkAnswers(ctx, admin)

	// Every window equals the clean run's; nothing counted twice.
	o := compareRuns(project(windows), project(want.Windows))
	t.Logf("%d of %d windows equal the single-source run's; %d rows in LATE (%d there)", o.equal, o.windows, len(late), len(want.Late))
	if len(o.diffs) > 0 {
		t.Errorf("%d of %d windows differ from the single-source run of the same records phase by phase: %d events short, %d beyond",
			len(o.diffs), o.windows, o.lost, o.double)
		for _, diff := range o.diffs {
			t.Errorf("%s", diff)
		}
	}
	if got, wantLate := lateIDs(late), lateIDs(want.Late); strings.Join(got, ",") != strings.Join(wantLate, ",") {
		t.Errorf("LATE holds %d events, the single-source run %d", len(got), len(wantLate))
	}
	lateSeen := map[string]bool{}
	for _, row := range late {
		if lateSeen[row.EventID] {
			t.Errorf("LATE holds %s twice", row.EventID)
		}
		lateSeen[row.EventID] = true
	}
	for _, w := range windows {
		if n := in.submissions[w.WindowID]; w.Count+w.LateDropped > n {
			t.Errorf("window %s: count %d + late_dropped %d exceeds its %d distinct submissions: events counted twice", w.WindowID, w.Count, w.LateDropped, n)
		}
		if w.Status != window.StatusFinal {
			t.Errorf("window %s is %s after --end-of-stream", w.WindowID, w.Status)
		}
	}
	out, holds := d.reconcileDeployment(ctx, in.byPhase, windows, late)
	if !holds {
		t.Errorf("receiptctl reconcile (the records phase by phase, the deployment's parameters) against the deployment: parity does not hold:\n%s", out)
	} else {
		t.Logf("receiptctl reconcile: %s", lastLine(out))
	}
	rep, _ := rawParity(t, ctx, admin, windows, late)
	logParity(t, "the batch pass over RAW as stored (two instances as sources)", rep)
	t.Logf("took %s", time.Since(began).Round(100*time.Millisecond))
}

// waitReady waits until the process's /readyz answers 200.
func waitReady(t *testing.T, ctx context.Context, p *proc) {
	t.Helper()
	c := &http.Client{Timeout: time.Second}
	testenv.CheckFor(t, time.Minute, 50*time.Millisecond, func() error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.http+"/readyz", nil)
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s /readyz: %d %s", p.name, resp.StatusCode, b)
		}
		return nil
	})
}

// rawRecord is one record RAW holds.
type rawRecord struct {
	id     string
	source string
}

// checkAnswers checks what the producers were told against RAW: every
// record's final answer names a RAW message of that event; every answer
// naming a record gives the same sequence; none is answered stored twice
// (a record sent again is a duplicate, with the original's sequence);
// a byte-identical repeat of an earlier record is a duplicate of it; and
// RAW holds every distinct record once.
func (fr *frontDoorRun) checkAnswers(ctx context.Context, admin *connect.Conn) {
	t := fr.t
	t.Helper()
	raw := map[uint64]rawRecord{}
	held := map[[32]byte]uint64{}
	twice := 0
	readAgain(t, "RAW", func() error {
		clear(raw)
		clear(held)
		twice = 0
		return stream.ReadAll(ctx, admin.JS, wire.For("").Stream(wire.Raw), func(m jetstream.Msg) error {
			if m.Headers().Get(wire.HdrHeartbeat) != "" {
				return nil
			}
			meta, err := m.Metadata()
			if err != nil {
				return err
			}
			seq := meta.Sequence.Stream
			raw[seq] = rawRecord{id: contract.PeekEventID(m.Data()), source: m.Headers().Get(wire.HdrSource)}
			sum := sha256.Sum256(m.Data())
			if first, ok := held[sum]; ok {
				if twice < 10 {
					t.Errorf("RAW holds record %q twice: seq %d and %d (a record sent again was stored again)", raw[seq].id, first, seq)
				}
				twice++
				return nil
			}
			held[sum] = seq
			return nil
		})
	})
	if twice > 0 {
		t.Errorf("RAW holds %d records more than once", twice)
	}
	if len(held) != fr.in.distinct {
		t.Errorf("RAW holds %d distinct records; the producers sent %d", len(held), fr.in.distinct)
	}
	bySource := map[string]int{}
	for _, r := range raw {
		bySource[r.source]++
	}
	t.Logf("RAW holds %d records, by source %v", len(raw), bySource)

	var stored, dups, invalid, named, before int
	bad := 0
	report := func(format string, args ...any) {
		if bad < 20 {
			t.Errorf(format, args...)
		}
		bad++
	}
	for k, rec := range fr.in.records {
		seen := fr.seen[k]
		var final *fdSeen
		storedCount := 0
		for j := range seen {
			s := &seen[j]
			if s.final {
				final = s
			}
			if s.status == frontdoor.StatusStored {
				storedCount++
			}
			if s.seq != seen[0].seq {
				report("record %d (%q): answers give seq %d and %d", k, rec.id, seen[0].seq, s.seq)
			}
		}
		if final == nil {
			report("record %d (%q) of producer %d has no final answer", k, rec.id, rec.producer)
			continue
		}
		named += len(seen) - 1
		if len(seen) > 1 {
			before++
		}
		if storedCount > 1 {
			report("record %d (%q) was answered stored %d times", k, rec.id, storedCount)
		}
		if storedCount == 1 && len(seen) > 1 && final.status == frontdoor.StatusStored {
			report("record %d (%q): named by an earlier answer (stored or duplicate), and its final answer says stored, not duplicate", k, rec.id)
		}
		switch final.status {
		case frontdoor.StatusStored:
			stored++
		case frontdoor.StatusDuplicate:
			dups++
		case frontdoor.StatusInvalid:
			invalid++
		}
		r, ok := raw[final.seq]
		switch {
		case !ok:
			report("record %d (%q): answered %s with seq %d, which RAW does not hold as a record", k, rec.id, final.status, final.seq)
		case r.id != rec.id:
			report("record %d (%q): answered %s with seq %d, which holds event %q", k, rec.id, final.status, final.seq, r.id)
		}
		if rec.original >= 0 {
			orig := fr.seen[rec.original]
			switch {
			case final.status != frontdoor.StatusDuplicate:
				report("record %d (%q) repeats record %d byte for byte and was answered %s, not duplicate", k, rec.id, rec.original, final.status)
			case len(orig) > 0 && orig[0].seq != final.seq:
				report("record %d (%q) repeats record %d (seq %d) and was answered seq %d", k, rec.id, rec.original, orig[0].seq, final.seq)
			}
		}
	}
	if bad > 20 {
		t.Errorf("… %d answer problems in all", bad)
	}
	for _, p := range fr.problems {
		t.Errorf("answer: %s", p)
	}
	t.Logf("final answers: %d stored, %d duplicate, %d invalid; %d records were named by an earlier answer too (%d such answers), each with the same seq",
		stored, dups, invalid, before, named)
	if stored+invalid > fr.in.distinct || stored == 0 {
		t.Errorf("%d records answered stored and %d invalid; %d distinct records were sent", stored, invalid, fr.in.distinct)
	}
}
