package traffic

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/window"
)

// Timing rules the generator aims at (docs/spec.md §3 defaults).
const (
	lateness = window.DefaultLateness
	grace    = window.DefaultGrace
	minuteMs = int64(time.Minute / time.Millisecond)
	hourMs   = int64(time.Hour / time.Millisecond)
)

// ringSize is how many recent valid records retries and conflicting
// duplicates are drawn from.
const ringSize = 512

// tooLargePad makes a too_large record comfortably over 64 KiB.
const tooLargePad = 70 << 10

// invalidCycle is the order invalid records go through the reasons.
var invalidCycle = []contract.Reason{
	contract.ReasonMalformedJSON,
	contract.ReasonMissingField,
	contract.ReasonUnsupportedSchema,
	contract.ReasonUnknownType,
	contract.ReasonBadTimestamp,
	contract.ReasonFutureTimestamp,
	contract.ReasonConflictingDuplicate,
	contract.ReasonInvalidField,
	contract.ReasonTooLarge,
}

// Stats counts what Write wrote, per kind.
type Stats struct {
	// Records is the number of lines written; Bytes their size with
	// newlines.
	Records int
	Bytes   int64
	// Events is the number of distinct valid events (new event ids), of
	// every type; Submissions and Other split them by type.
	Events      int
	Submissions int
	Other       int
	// V1 is the number of distinct valid events written in schema v1.
	V1 int
	// Disordered is the number of new events jittered back in time.
	Disordered int
	// LateWithinGrace and LateAfterGrace count the late submissions; the
	// first are always counted by the stream, the second always routed to
	// LATE (for any partition count).
	LateWithinGrace int
	LateAfterGrace  int
	// Duplicates is the number of byte-identical retries.
	Duplicates int
	// Invalid is the number of invalid records per intended reason.
	Invalid map[contract.Reason]int
	// SubmissionsByWindow counts Submissions by window id.
	SubmissionsByWindow map[string]int
	// LateAfterGraceByWindow counts LateAfterGrace by window id.
	LateAfterGraceByWindow map[string]int
	// FirstEvent and MaxEvent are the first and the largest event time of
	// the valid events.
	FirstEvent time.Time
	MaxEvent   time.Time
}

// InvalidTotal is the number of invalid records written.
func (s Stats) InvalidTotal() int {
	n := 0
	for _, v := range s.Invalid {
		n += v
	}
	return n
}

// Write writes o.Events NDJSON records to w in arrival order and returns what
// it wrote. It errors when o is invalid (Config.Validate) or w fails; safe to
// call concurrently with distinct writers.
func Write(w io.Writer, o Config) (Stats, error) {
	bw := bufio.NewWriterSize(w, 256<<10)
	st, err := Each(o, func(r Record) error {
		if _, err := bw.Write(r.Line); err != nil {
			return err
		}
		return bw.WriteByte('\n')
	})
	if err != nil {
		return st, err
	}
	if err := bw.Flush(); err != nil {
		return st, fmt.Errorf("gen: flush: %w", err)
	}
	return st, nil
}

// RecordKind says what a generated record is.
type RecordKind uint8

// Kinds of generated records.
const (
	// KindNew is a new valid event (of any type), on time, possibly
	// disordered within the lateness.
	KindNew RecordKind = iota + 1
	// KindLateWithinGrace is a new late submission that is still counted.
	KindLateWithinGrace
	// KindLateAfterGrace is a new submission the stream routes to LATE.
	KindLateAfterGrace
	// KindDuplicate is a byte-identical retry of an earlier valid record.
	KindDuplicate
	// KindInvalid breaks the contract with the reason in Record.Reason.
	KindInvalid
)

// Record is one generated record and what the generator meant by it.
type Record struct {
	// Line is the NDJSON record without its newline. It must not be
	// modified: a duplicate shares the bytes of the record it retries.
	Line []byte
	Kind RecordKind
	// EventID, PartitionKey, Type and EventTime (ms) are the event's; for
	// a duplicate those of the retried record. An invalid record's fields
	// are the ones it was built from before it was broken.
	EventID      string
	PartitionKey string
	Type         string
	EventTime    int64
	// Reason is the rejection an invalid record is built to get.
	Reason contract.Reason
}

// Each generates o.Events records in arrival order, the same ones Write
// writes, and calls fn with each; an error from fn stops it and is
// returned wrapped. It returns an error for impossible Config too.
func Each(o Config, fn func(Record) error) (Stats, error) {
	if err := o.Validate(); err != nil {
		return Stats{}, err
	}
	o = o.withDefaults()
	g := newGenerator(o)
	for i := range o.Events {
		g.cur = Record{}
		line := g.next(i)
		g.stats.Records++
		g.stats.Bytes += int64(len(line)) + 1
		g.cur.Line = line
		if err := fn(g.cur); err != nil {
			return g.stats, fmt.Errorf("gen: record %d: %w", i+1, err)
		}
	}
	return g.stats, nil
}

// describe sets the current record's event fields from ev.
func (g *generator) describe(kind RecordKind, ev *event) {
	g.cur.Kind = kind
	g.cur.EventID = ev.id
	g.cur.PartitionKey = ev.key
	g.cur.Type = ev.typ
	g.cur.EventTime = ev.t
}

// event is one record before rendering.
type event struct {
	version  int // 1 or 2 (or 3 for an unsupported record)
	id       string
	receipt  string
	typ      string
	t        int64 // event time, ms
	ingested int64 // ms
	key      string
	payload  string // raw JSON object
}

// remembered is a valid record kept for retries and conflicts.
type remembered struct {
	ev   event
	line []byte
}

type generator struct {
	o        Config
	r        *rand.Rand
	stats    Stats
	n        int   // last event number used
	startMs  int64 // o.Start in ms
	spanMs   int64
	maxT     int64 // largest valid event time so far; 0 before the first
	storeMax map[string]int64
	last     string // store of the last new on-time event
	ring     []remembered
	ringPos  int
	invalid  int    // invalid records written, drives invalidCycle
	cur      Record // what the record being generated is
}

func newGenerator(o Config) *generator {
	return &generator{
		o:        o,
		r:        rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15)),
		startMs:  o.Start.UnixMilli(),
		spanMs:   int64(o.Hours) * hourMs,
		storeMax: make(map[string]int64),
		stats: Stats{
			Invalid:                make(map[contract.Reason]int),
			SubmissionsByWindow:    make(map[string]int),
			LateAfterGraceByWindow: make(map[string]int),
		},
	}
}

// next returns record i (without newline).
func (g *generator) next(i int) []byte {
	base := g.startMs + g.spanMs*int64(i)/int64(g.o.Events)
	if i == 0 {
		return g.newEvent(base, false)
	}
	u := g.r.Float64()
	o := g.o
	switch {
	case u < o.DupRate:
		return g.duplicate()
	case u < o.DupRate+o.InvalidRate:
		return g.invalidRecord(base)
	case u < o.DupRate+o.InvalidRate+o.LateRate:
		if g.r.IntN(2) == 0 {
			return g.lateWithinGrace()
		}
		return g.lateAfterGrace()
	default:
		return g.newEvent(base, g.r.Float64() < o.DisorderRate)
	}
}

// pickStore draws a partition key: store-0 with HotShare, else one of the
// others evenly.
func (g *generator) pickStore() string {
	if g.o.Stores == 1 || g.r.Float64() < g.o.HotShare {
		return "store-0"
	}
	return "store-" + strconv.Itoa(1+g.r.IntN(g.o.Stores-1))
}

// fresh returns a new valid submission of store key at event time t (ms),
// not yet accepted.
func (g *generator) fresh(key string, t int64, typ string) event {
	g.n++
	ev := event{
		version: 2,
		id:      fmt.Sprintf("evt-%d-%d", g.o.Seed, g.n),
		receipt: fmt.Sprintf("rcpt-%d", g.n),
		typ:     typ,
		t:       t,
		key:     key,
	}
	if g.r.Float64() < g.o.V1Share {
		ev.version = 1
		ev.t = floorMinute(t)
	}
	ev.payload = g.payload(key, g.o.PayloadBytes)
	return ev
}

// newEvent writes a new event of any type at base, jittered back by less
// than the lateness when disorder is set.
func (g *generator) newEvent(base int64, disorder bool) []byte {
	key := g.pickStore()
	typ := contract.TypeSubmitted
	if g.r.Float64() < g.o.OtherTypeShare {
		typ = contract.TypeDraftSaved
		if g.r.IntN(2) == 0 {
			typ = contract.TypeViewed
		}
	}
	t := base
	if disorder {
		// 1 s to 4 min back; with v1's minute floor still under the 5 min
		// lateness, so always on time.
		t -= 1000 + g.r.Int64N(4*minuteMs-1000)
		g.stats.Disordered++
	}
	ev := g.fresh(key, t, typ)
	g.last = key
	g.describe(KindNew, &ev)
	return g.accept(ev)
}

// lateWithinGrace writes a submission 6 to 59 minutes behind the newest
// event time: within grace for every partition, so always counted, as a
// correction when its window has already closed in its partition.
func (g *generator) lateWithinGrace() []byte {
	t := g.maxT - 6*minuteMs - g.r.Int64N(53*minuteMs)
	ev := g.fresh(g.pickStore(), t, contract.TypeSubmitted)
	g.stats.LateWithinGrace++
	g.describe(KindLateWithinGrace, &ev)
	return g.accept(ev)
}

// lateAfterGrace writes a submission of the newest event's store in a window
// whose end plus grace is at or before that store's watermark, hence too late
// for the stream whatever the partition count.
func (g *generator) lateAfterGrace() []byte {
	key := g.last
	wm := g.storeMax[key] - int64(lateness/time.Millisecond)
	// The window [s, s+1h) with s+1h+grace <= wm, one or two hours back.
	s := window.StartMs(wm-int64(grace/time.Millisecond)) - hourMs - hourMs*g.r.Int64N(2)
	hi := min(s+hourMs, g.maxT-70*minuteMs)
	t := s + g.r.Int64N(hi-s)
	ev := g.fresh(key, t, contract.TypeSubmitted)
	g.stats.LateAfterGrace++
	g.stats.LateAfterGraceByWindow[window.ID(ev.t)]++
	g.describe(KindLateAfterGrace, &ev)
	return g.accept(ev)
}

// accept stamps ev's arrival, renders it, and books it as a valid event.
func (g *generator) accept(ev event) []byte {
	if ev.t > g.maxT {
		g.maxT = ev.t
	}
	if ev.t > g.storeMax[ev.key] {
		g.storeMax[ev.key] = ev.t
	}
	ev.ingested = g.arrival()
	line := render(ev, nil)
	s := &g.stats
	s.Events++
	if ev.version == 1 {
		s.V1++
	}
	if ev.typ == contract.TypeSubmitted {
		s.Submissions++
		s.SubmissionsByWindow[window.ID(ev.t)]++
	} else {
		s.Other++
	}
	t := time.UnixMilli(ev.t).UTC()
	if s.FirstEvent.IsZero() {
		s.FirstEvent = t
	}
	if t.After(s.MaxEvent) {
		s.MaxEvent = t
	}
	g.remember(ev, line)
	return line
}

// arrival is the ingest time of the next record: a few seconds after the
// newest event time.
func (g *generator) arrival() int64 {
	return g.maxT + 1000 + g.r.Int64N(8000)
}

func (g *generator) remember(ev event, line []byte) {
	m := remembered{ev: ev, line: line}
	if len(g.ring) < ringSize {
		g.ring = append(g.ring, m)
		return
	}
	g.ring[g.ringPos] = m
	g.ringPos = (g.ringPos + 1) % ringSize
}

// duplicate re-emits a recent valid record byte for byte.
func (g *generator) duplicate() []byte {
	m := g.ring[g.r.IntN(len(g.ring))]
	g.stats.Duplicates++
	g.describe(KindDuplicate, &m.ev)
	return m.line
}

// invalidRecord writes the next record of invalidCycle: a record at base
// that breaks exactly one rule. Its ingested_at is never before base, so
// only the future_timestamp record is in the future.
func (g *generator) invalidRecord(base int64) []byte {
	reason := invalidCycle[g.invalid%len(invalidCycle)]
	g.invalid++
	g.stats.Invalid[reason]++
	g.n++
	ev := event{
		version:  2,
		id:       fmt.Sprintf("evt-%d-%d", g.o.Seed, g.n),
		receipt:  fmt.Sprintf("rcpt-%d", g.n),
		typ:      contract.TypeSubmitted,
		t:        base,
		ingested: max(g.maxT, base) + 1000 + g.r.Int64N(8000),
		key:      g.pickStore(),
	}
	ev.payload = g.payload(ev.key, g.o.PayloadBytes)
	g.describe(KindInvalid, &ev)
	g.cur.Reason = reason
	switch reason {
	case contract.ReasonMalformedJSON:
		line := render(ev, nil)
		return line[:len(line)/2]
	case contract.ReasonMissingField:
		return render(ev, map[string]string{"receipt_id": ""})
	case contract.ReasonUnsupportedSchema:
		ev.version = 3
		return render(ev, nil)
	case contract.ReasonUnknownType:
		ev.typ = "refunded"
		return render(ev, nil)
	case contract.ReasonBadTimestamp:
		bad := `"1999-12-31T23:59:00Z"`
		if g.stats.Invalid[reason]%2 == 0 {
			bad = `"` + time.UnixMilli(base).UTC().Format("2006-01-02") + `T25:70:00Z"`
		}
		return render(ev, map[string]string{"occurred_at": bad})
	case contract.ReasonFutureTimestamp:
		ev.t = ev.ingested + 10*minuteMs + 1000 + g.r.Int64N(50*minuteMs)
		return render(ev, nil)
	case contract.ReasonConflictingDuplicate:
		m := g.ring[g.r.IntN(len(g.ring))]
		c := m.ev
		c.receipt += "-x"
		c.ingested = ev.ingested
		c.payload = g.payload(c.key, g.o.PayloadBytes)
		g.describe(KindInvalid, &c)
		g.cur.Reason = reason
		return render(c, nil)
	case contract.ReasonInvalidField:
		return render(ev, map[string]string{"receipt_id": `"rcpt ` + strconv.Itoa(g.n) + `#"`})
	default: // contract.ReasonTooLarge
		ev.payload = g.payload(ev.key, tooLargePad)
		return render(ev, nil)
	}
}

// payload returns a JSON object of about size bytes.
func (g *generator) payload(key string, size int) string {
	p := fmt.Sprintf(`{"store":%q,"amount_cents":%d,"items":%d,"currency":"EUR","pad":""}`,
		key, 100+g.r.IntN(99900), 1+g.r.IntN(20))
	if pad := size - len(p); pad > 0 {
		p = p[:len(p)-2] + strings.Repeat("x", pad) + `"}`
	}
	return p
}

// msLayout renders instants with millisecond precision in UTC.
const msLayout = "2006-01-02T15:04:05.000Z"

// render writes ev as one JSON object with a fixed field order. override
// replaces the raw JSON of a field; an empty value drops the field.
func render(ev event, override map[string]string) []byte {
	type field struct{ k, v string }
	fields := []field{
		{"schema_version", strconv.Itoa(ev.version)},
		{"event_id", strconv.Quote(ev.id)},
		{"receipt_id", strconv.Quote(ev.receipt)},
		{"type", strconv.Quote(ev.typ)},
	}
	if ev.version == 1 {
		fields = append(fields, field{"occurred_minute", strconv.FormatInt(ev.t/minuteMs, 10)})
	} else {
		fields = append(fields, field{"occurred_at", strconv.Quote(time.UnixMilli(ev.t).UTC().Format(msLayout))})
	}
	fields = append(fields,
		field{"ingested_at", strconv.Quote(time.UnixMilli(ev.ingested).UTC().Format(msLayout))},
		field{"partition_key", strconv.Quote(ev.key)},
	)
	if ev.version != 1 {
		fields = append(fields, field{"producer_version", `"pos-2.4.1"`})
	}
	fields = append(fields, field{"payload", ev.payload})

	b := make([]byte, 0, 448)
	b = append(b, '{')
	first := true
	for _, f := range fields {
		v := f.v
		if o, ok := override[f.k]; ok {
			if o == "" {
				continue
			}
			v = o
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, '"')
		b = append(b, f.k...)
		b = append(b, '"', ':')
		b = append(b, v...)
	}
	return append(b, '}')
}

// floorMinute truncates ms to the whole minute (v1 event time).
func floorMinute(ms int64) int64 { return ms - ms%minuteMs }
