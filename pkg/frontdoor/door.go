package frontdoor

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/receiptflow/receiptflow/pkg/ingest"
)

// Statuses of a record in an answer (docs/spec.md §10).
const (
	StatusStored    = "stored"
	StatusDuplicate = "duplicate"
	StatusInvalid   = "invalid"
)

// Result is the answer for one record.
type Result struct {
	// EventID is the record's event_id, when one could be read.
	EventID string `json:"event_id,omitempty"`
	Status  string `json:"status"`
	// Reason is the contract's reason for an invalid record.
	Reason string `json:"reason,omitempty"`
	// Seq is the record's RAW sequence (the original's for a duplicate).
	Seq uint64 `json:"seq"`
}

// Answer is the answer to one request. Code is its HTTP status (also the
// NATS reply's Rf-Status header).
type Answer struct {
	Code       int      `json:"-"`
	Results    []Result `json:"results"`
	Stored     int      `json:"stored"`
	Duplicates int      `json:"duplicates"`
	Invalid    int      `json:"invalid"`
	// Error says why the request was not (wholly) taken; empty on 200.
	Error string `json:"error,omitempty"`
	// RetryAfter is set with 503: when to send the records not stored again.
	RetryAfter time.Duration `json:"-"`
	// notStored counts the records of a 503 answer that it does not name.
	notStored int
}

// retryAfterSeconds is RetryAfter as a Retry-After value: whole seconds,
// at least 1.
func (a *Answer) retryAfterSeconds() string {
	return strconv.Itoa(max(1, int(a.RetryAfter.Round(time.Second)/time.Second)))
}

// Config configures a Door.
type Config struct {
	// MaxRequestBytes and MaxRequestEvents bound one request (413 beyond).
	MaxRequestBytes  int64
	MaxRequestEvents int
	// MaxInflight bounds the records admitted and not yet answered, over
	// every request of the instance (503 beyond).
	MaxInflight int
	// RetryAfter is the wait a 503 asks for (default 1s).
	RetryAfter time.Duration
	// Connected reports whether the connection to NATS is up (nil: always):
	// while it is down the door answers 503 at once.
	Connected func() bool
}

// Defaults of Config (docs/spec.md §10).
const (
	DefaultMaxRequestBytes  = 4 << 20
	DefaultMaxRequestEvents = 1000
	DefaultMaxInflight      = 20000
)

func (c Config) withDefaults() Config {
	if c.MaxRequestBytes <= 0 {
		c.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if c.MaxRequestEvents <= 0 {
		c.MaxRequestEvents = DefaultMaxRequestEvents
	}
	if c.MaxInflight <= 0 {
		c.MaxInflight = DefaultMaxInflight
	}
	if c.RetryAfter <= 0 {
		c.RetryAfter = time.Second
	}
	if c.Connected == nil {
		c.Connected = func() bool { return true }
	}
	return c
}

// Door takes requests of both doors into one Ingester: the instance's
// source (docs/spec.md §3.1). Safe for concurrent use.
type Door struct {
	cfg  Config
	open func() *ingest.Ingester
	m    *Metrics

	mu       sync.Mutex
	in       *ingest.Ingester
	inflight atomic.Int64
	closing  atomic.Bool
	// failed is the last failure of RAW, cleared by a record stored since.
	failed atomic.Pointer[error]
}

// New returns a Door whose records go to the Ingester open returns; open
// is called again when an Ingester fails (RAW did not confirm a batch in
// its RetryFor), so that the next request starts afresh. m (nil: none)
// counts requests and records.
func New(cfg Config, open func() *ingest.Ingester, m *Metrics) *Door {
	d := &Door{cfg: cfg.withDefaults(), open: open, m: m.or()}
	d.in = open()
	return d
}

// MaxRequestBytes is the byte limit of one request.
func (d *Door) MaxRequestBytes() int64 { return d.cfg.MaxRequestBytes }

// NotReady says why the door cannot take records now, "" when it can.
func (d *Door) NotReady() string {
	switch {
	case d.closing.Load():
		return "stopping"
	case !d.cfg.Connected():
		return "NATS is not connected"
	}
	if err := d.failed.Load(); err != nil {
		return "RAW did not confirm the last records: " + (*err).Error()
	}
	return ""
}

// unavailable is the 503 answer; results are those already known.
func (d *Door) unavailable(a *Answer, why string) *Answer {
	a.Code, a.Error, a.RetryAfter = http.StatusServiceUnavailable, why, d.cfg.RetryAfter
	return a
}

// Submit takes one request's body of content type contentType (empty:
// sniffed) from door ("http" or "nats") and answers it once every record
// it calls stored is confirmed in RAW, or ctx ends (the records already
// given to RAW are still stored; the answer then says 503).
func (d *Door) Submit(ctx context.Context, door, contentType string, body []byte) *Answer {
	ch := make(chan *Answer, 1)
	expire := d.Start(door, contentType, body, func(a *Answer) { ch <- a })
	select {
	case a := <-ch:
		return a
	case <-ctx.Done():
		expire("the request ended before RAW confirmed its records: " + ctx.Err().Error() + "; send them again (what is stored is a duplicate)")
		return <-ch
	}
}

// Start takes one request as Submit does, without waiting: respond is
// called once with the answer, at once for a request refused whole,
// else when every record given to RAW is confirmed or failed (from the
// Ingester's sender goroutine, so respond must not block), or when expire
// is called first (a 503 saying why; the records given to RAW are still
// stored).
func (d *Door) Start(door, contentType string, body []byte, respond func(*Answer)) (expire func(why string)) {
	c := &call{d: d, door: door, began: time.Now(), respond: respond}
	a, recs := d.admit(contentType, body)
	if a.Code != 0 {
		c.answer(a)
		return c.expire
	}
	c.records = len(recs)
	d.take(c, a, recs)
	return c.expire
}

// call is one request being answered: by the first of its answer and its
// expiry.
type call struct {
	d        *Door
	door     string
	began    time.Time
	respond  func(*Answer)
	records  int
	answered atomic.Bool
}

func (c *call) answer(a *Answer) {
	if !c.answered.CompareAndSwap(false, true) {
		return
	}
	c.d.m.observe(c.door, a, time.Since(c.began))
	c.respond(a)
}

func (c *call) expire(why string) {
	if c.answered.Load() {
		return
	}
	c.answer(c.d.unavailable(&Answer{Results: []Result{}, notStored: c.records}, why))
}

// admit checks a request and admits its records (a.Code 0), or answers
// it whole (a.Code set, nothing stored). Admitted records count in
// flight until take answers them.
func (d *Door) admit(contentType string, body []byte) (*Answer, [][]byte) {
	a := &Answer{Results: []Result{}}
	if int64(len(body)) > d.cfg.MaxRequestBytes {
		a.Code, a.Error = http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is over %d bytes (--max-request-bytes); nothing stored", d.cfg.MaxRequestBytes)
		return a, nil
	}
	mt, err := mediaType(contentType, body)
	if err != nil {
		a.Code, a.Error = http.StatusUnsupportedMediaType, err.Error()+"; nothing stored"
		return a, nil
	}
	recs, err := split(mt, body)
	if err != nil {
		a.Code, a.Error = http.StatusBadRequest, err.Error()+"; nothing stored"
		return a, nil
	}
	if len(recs) > d.cfg.MaxRequestEvents {
		a.Code, a.Error = http.StatusRequestEntityTooLarge, fmt.Sprintf("%d records, over %d (--max-request-events); nothing stored", len(recs), d.cfg.MaxRequestEvents)
		return a, nil
	}
	switch {
	case d.closing.Load():
		a.notStored = len(recs)
		return d.unavailable(a, "the instance is stopping; nothing stored"), nil
	case !d.cfg.Connected():
		a.notStored = len(recs)
		return d.unavailable(a, "NATS is not connected; nothing stored"), nil
	}
	n := int64(len(recs))
	if d.inflight.Add(n) > int64(d.cfg.MaxInflight) {
		d.inflight.Add(-n)
		a.notStored = len(recs)
		return d.unavailable(a, fmt.Sprintf("too many records in flight (--max-inflight-events %d); nothing stored", d.cfg.MaxInflight)), nil
	}
	d.m.inflight.Add(float64(n))
	return a, recs
}

// pending is one record given to the Ingester.
type pending struct {
	res Result
	ack ingest.Ack
}

// take gives recs to the Ingester in order and answers c when the last of
// their acks arrives (no goroutine waits on the request's behalf); then
// they no longer count in flight.
func (d *Door) take(c *call, a *Answer, recs [][]byte) {
	ps := make([]pending, len(recs))
	in := d.ingester()
	var stop error // why the records from sent on were not given to RAW
	sent := 0
	var left atomic.Int64
	left.Store(1)
	release := func() {
		if left.Add(-1) != 0 {
			return
		}
		n := int64(len(recs))
		d.inflight.Add(-n)
		d.m.inflight.Sub(float64(n))
		c.answer(d.settle(a, in, ps[:sent], len(recs), stop))
	}
	for i, rec := range recs {
		p := &ps[i]
		left.Add(1)
		id, rej, err := in.Submit(rec, func(ack ingest.Ack) {
			p.ack = ack
			release()
		})
		if err != nil {
			left.Add(-1)
			stop = err
			break
		}
		p.res.EventID = id
		if rej != nil {
			p.res.Status, p.res.Reason = StatusInvalid, string(rej.Reason)
		}
		sent++
	}
	release()
}

// settle is the answer to a request of total records once the acks of
// the first ones (ps) are in; stop is why the rest were not given to RAW.
func (d *Door) settle(a *Answer, in *ingest.Ingester, ps []pending, total int, stop error) *Answer {
	var failure error
	for i := range ps {
		p := &ps[i]
		if p.ack.Err != nil {
			failure = p.ack.Err
			continue
		}
		r := p.res
		r.Seq = p.ack.Seq
		switch {
		case r.Status == StatusInvalid:
			a.Invalid++
		case p.ack.Duplicate:
			r.Status = StatusDuplicate
			a.Duplicates++
		default:
			r.Status = StatusStored
			a.Stored++
		}
		a.Results = append(a.Results, r)
	}
	if failure == nil && stop == nil {
		a.Code = http.StatusOK
		d.failed.Store(nil)
		return a
	}
	if failure == nil {
		failure = stop
	}
	var ue *ingest.UnconfirmedError
	if errors.As(failure, &ue) || errors.Is(failure, ingest.ErrClosed) {
		d.replace(in, failure)
	}
	why := "RAW cannot take the records now: " + failure.Error()
	if errors.Is(failure, ingest.ErrBusy) {
		why = "too many records in flight"
	}
	a.notStored = total - len(a.Results)
	return d.unavailable(a, why+"; the results name the records stored, send the others again")
}

// ingester is the current Ingester.
func (d *Door) ingester() *ingest.Ingester {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.in
}

// replace puts a fresh Ingester in place of failed, which err stopped;
// records already queued behind the failure were answered with it.
func (d *Door) replace(failed *ingest.Ingester, err error) {
	d.failed.Store(&err)
	if d.closing.Load() {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.in != failed {
		return
	}
	go failed.Close(context.Background())
	d.in = d.open()
}

// Close stops admitting (every request from now on is 503), then closes
// the Ingester: what it holds is stored, and the source leaves
// (docs/spec.md §3.1). Call it once the requests in flight are answered.
func (d *Door) Close(ctx context.Context) error {
	d.closing.Store(true)
	return d.ingester().Close(ctx)
}

// Stats is what the current Ingester did (a failed one's counts are
// left behind with it).
func (d *Door) Stats() ingest.Stats { return d.ingester().Stats() }

// Drain stops admitting new requests (503) without closing the Ingester.
func (d *Door) Drain() { d.closing.Store(true) }
