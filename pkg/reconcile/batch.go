package reconcile

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strconv"
	"time"

	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/internal/digest"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// Batch is the result of one batch pass over a raw snapshot. It is built by
// Count and read-only afterwards; reading it from several goroutines is safe.
type Batch struct {
	// Partitions is the partition count the window counts are split by.
	Partitions int
	// Records is the number of non-blank lines read.
	Records int
	// Valid is the number of records that passed validation and did not
	// conflict with an earlier record of the same event_id; it includes
	// duplicates.
	Valid int
	// Counted is the number of distinct submissions, whatever their
	// lateness: counted in windows or judged too late.
	Counted int
	// InWindows is the number of those counted in their window (on time
	// or as corrections), Corrections the number counted as corrections.
	InWindows   int
	Corrections int
	// Heartbeats is the number of heartbeats replayed (per partition).
	Heartbeats int
	// Other is the number of distinct valid events that never count
	// (draft_saved, viewed).
	Other int
	// DuplicateCount is the number of valid records whose event_id was
	// already claimed with the same content (retries).
	DuplicateCount int
	// Windows holds every window with at least one counted submission or
	// one submission judged too late after grace, by window id.
	Windows map[string]*WindowCount
	// Late lists every new submission the pass judged too late (after
	// grace, or retired past the replay horizon), in snapshot order.
	Late []LateJudgment
	// Rejected lists every rejected record in file order.
	Rejected []Rejection
	// Duplicates lists every duplicate record in file order.
	Duplicates []Duplicate

	claims *claimTable
	// block is the claim table's block of the ids of the records being
	// applied.
	block uint32
	// windowIDs are the ids of the windows claims point at (counted in,
	// or judged too late for), refOf their index plus one by start (ms).
	windowIDs []string
	refOf     map[int64]int32
	// validator and ingestedAt are the options of the pass.
	validator  *contract.Validator
	hot        window.HotKeys
	ingestedAt time.Time
	// rejectedIn indexes Rejected by the window of each rejected record
	// whose event time could be read.
	rejectedIn map[string][]int
	// byStart finds the window of a counted event by its start (ms)
	// without formatting its id.
	byStart map[int64]*WindowCount
	// last is the window of the last counted event, lastStart its start;
	// newest the window made last.
	last      *WindowCount
	lastStart int64
	newest    *WindowCount
	// judge judges the records given to Add.
	judge *judge

	// The watermark replay (docs/spec.md §3, §3.1): per partition the
	// watermark W_p (ms) and its broker clock and sources; lateness,
	// grace, horizon, the source idle and forget times in ms.
	wm                       []int64
	parts                    []partSources
	lateness, grace, horizon int64
	idle, forget             int64
	// ingestedMs is Config.DefaultIngestedAt in ms: the broker time of
	// the heartbeats Count places in a file.
	ingestedMs int64
	// lateOf indexes Late by event id.
	lateOf map[string]int
	// retiredRetries are ids of which a retry came once the id's window
	// was past the replay horizon: the stream may drop such a retry as
	// retired when it no longer holds the id.
	retiredRetries map[string]bool
	// The heartbeats of a file (Config.HeartbeatEvery, EndOfStream), as
	// ingest places them: records since the last heartbeat, the largest
	// valid event time so far, and whether a valid record came since.
	every     int
	eos       bool
	sinceBeat int
	progress  int64
	dirty     bool
	// file is set while Count reads a file: a retry (same event_id and
	// content) never reaches RAW there, as JetStream drops it by its
	// Nats-Msg-Id, so it touches no partition.
	file bool
}

// LateJudgment is a new submission the batch pass judged too late: its
// partition watermark, before the event, was at or past its window's end
// plus grace (Reason wire.ReasonAfterGrace), or past it by the replay horizon
// too (wire.ReasonRetired).
type LateJudgment struct {
	EventID  string `json:"event_id"`
	WindowID string `json:"window_id"`
	Reason   string `json:"reason"`
	// Watermark is the partition watermark the event was judged against.
	Watermark time.Time `json:"watermark"`
	Partition int       `json:"partition"`
	// Seq is the RAW sequence of the record (its record number in a file),
	// Line its line in a file (0 for a RAW stream).
	Seq  uint64 `json:"seq"`
	Line int    `json:"line,omitempty"`
}

// WindowCount is the batch's count of one window.
type WindowCount struct {
	ID    string
	Start time.Time
	End   time.Time
	// Count is the number of distinct submissions counted in the window
	// (on time or as corrections).
	Count int64
	// Corrections is the number of those counted as corrections;
	// LateDropped the number judged too late after grace (not counted).
	Corrections int64
	LateDropped int64
	// Digest is the digest of the counted event ids.
	Digest digest.Digest
	// IDs are the counted event ids in file order; CorrectionIDs those of
	// them counted as corrections.
	IDs           []string
	CorrectionIDs []string
	// ByPartition is the count per partition, indexed by partition.
	ByPartition []int64
	// Late are the window's submissions judged too late after grace.
	Late []LateJudgment
	// Duplicates are the retries of submissions counted in this window.
	Duplicates []Duplicate
	// Stores is the breakdown of Count by store (wire.NewBreakdown gives
	// the snapshot's form).
	Stores map[string]wire.StoreTotal

	// ref is the window's index in Batch.windowIDs plus one.
	ref int32
}

// Rejection is a record the batch pass rejected.
type Rejection struct {
	// Line is the 1-based line number in the input.
	Line int `json:"line"`
	// EventID is set when an event_id could be read.
	EventID string          `json:"event_id,omitempty"`
	Reason  contract.Reason `json:"reason"`
	Detail  string          `json:"detail"`
	// WindowID is the window of the record's event time, when one could be
	// read.
	WindowID string `json:"window_id,omitempty"`
}

// Duplicate is a valid record whose event_id was already claimed with the
// same content: a retry, never counted again.
type Duplicate struct {
	Line    int    `json:"line"`
	EventID string `json:"event_id"`
	// FirstLine is the line of the record that claimed the event_id.
	FirstLine int `json:"first_line"`
	// WindowID is the window the event was counted in (or judged too late
	// for); empty for events that never count.
	WindowID string `json:"window_id,omitempty"`
}

// Count runs the batch pass over r, one NDJSON record per line, as ingest
// would publish it (see the package doc). It errors only when r fails or the
// validator returns a non-rejection error; it reads r to the end, never closes it.
func Count(r io.Reader, opts Config) (*Batch, error) {
	b, err := NewBatch(opts)
	if err != nil {
		return nil, err
	}
	b.file = true
	maxLine := max(maxLineBytes, b.validator.Config().MaxSize+1)
	if err := b.countLines(r, maxLine, runtime.GOMAXPROCS(0)); err != nil {
		return nil, err
	}
	b.endOfFile()
	return b, nil
}

// maxRecordsHint caps Config.RecordsHint, so that a wild estimate cannot
// reserve gigabytes up front.
const maxRecordsHint = 50_000_000

// NewBatch starts an empty batch pass, to be fed record by record with Add
// (for a raw snapshot that is not a file, such as a RAW stream range).
func NewBatch(opts Config) (*Batch, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	parts := make([]partSources, opts.Partitions)
	for i := range parts {
		parts[i].clock = math.MinInt64
	}
	return &Batch{
		Partitions:     opts.Partitions,
		Windows:        make(map[string]*WindowCount),
		Late:           []LateJudgment{},
		claims:         newClaimTable(min(opts.RecordsHint, maxRecordsHint)),
		refOf:          make(map[int64]int32),
		rejectedIn:     make(map[string][]int),
		byStart:        make(map[int64]*WindowCount),
		validator:      opts.Validator,
		hot:            opts.HotKeys,
		ingestedAt:     opts.DefaultIngestedAt,
		wm:             make([]int64, opts.Partitions),
		parts:          parts,
		lateness:       opts.Lateness.Milliseconds(),
		grace:          opts.Grace.Milliseconds(),
		horizon:        opts.Horizon.Milliseconds(),
		idle:           opts.SourceIdle.Milliseconds(),
		forget:         max(window.SourceForget, opts.SourceIdle).Milliseconds(),
		ingestedMs:     opts.DefaultIngestedAt.UnixMilli(),
		lateOf:         make(map[string]int),
		retiredRetries: make(map[string]bool),
		every:          opts.HeartbeatEvery,
		eos:            opts.EndOfStream,
	}, nil
}

// Add applies record number n (1-based, in snapshot order), received at
// receivedAt: AddRecord with Seq and Line n. It errors only for a validator
// error that is not a contract rejection.
func (b *Batch) Add(n int, raw []byte, receivedAt time.Time) error {
	return b.AddRecord(Record{Seq: uint64(n), Line: n, Received: receivedAt, Data: raw})
}

// AddRecord applies the next record of a RAW snapshot, in RAW order, its
// heartbeats included (Config.HeartbeatEvery and EndOfStream do not apply).
// It errors only for a validator error that is not a contract rejection.
func (b *Batch) AddRecord(r Record) error {
	if b.judge == nil {
		b.judge = b.newJudge(0)
	}
	var d judgedRecord
	b.judge.raw(&d, &r)
	if err := b.alone(&d); err != nil {
		return err
	}
	return b.apply(&d)
}

// alone places the id of d, a record read on its own (not in a chunk), in
// a block of the claim table by itself, for the claim d may make.
func (b *Batch) alone(d *judgedRecord) error {
	if d.id == "" {
		return nil
	}
	blk, err := b.claims.addBlock(d.id)
	if err != nil {
		return err
	}
	b.block, d.idOff, d.idLen = blk, 0, len(d.id)
	return nil
}

// apply applies the verdict on one record: every record goes through here,
// in snapshot order.
func (b *Batch) apply(d *judgedRecord) error {
	if d.heartbeat {
		b.beat(d.rawPart, d.source, d.at, d.progress, d.leave)
		return nil
	}
	if err := b.applyRecord(d); err != nil {
		return err
	}
	if b.file && b.every > 0 {
		// Ingest's heartbeats, placed where ingest places them: after the
		// record that completes HeartbeatEvery records.
		if d.checked && d.ms > b.progress {
			b.progress = d.ms
		}
		b.dirty = b.dirty || d.checked
		if b.sinceBeat++; b.sinceBeat >= b.every {
			b.ingestBeat(b.progress)
		}
	}
	return nil
}

// ingestBeat is a heartbeat with progress to every partition, as ingest
// sends one (none while progress is not positive).
func (b *Batch) ingestBeat(progress int64) {
	b.sinceBeat, b.dirty = 0, false
	if progress <= 0 {
		return
	}
	for p := range b.Partitions {
		b.beat(p, wire.SourceLegacy, b.ingestedMs, progress, false)
	}
}

// endOfFile places the last heartbeat ingest sends at Close.
func (b *Batch) endOfFile() {
	if !b.file || b.every <= 0 {
		return
	}
	switch {
	case b.eos:
		b.ingestBeat(window.EndOfStream)
	case b.dirty:
		b.ingestBeat(b.progress)
	}
}

// partSources is what one partition knows of its sources (docs/spec.md
// §3.1): its broker clock (ms; math.MinInt64 before its first message)
// and each source it knows, in the order they came. Sources are few, so a
// slice searched in order is all it takes.
type partSources struct {
	clock int64
	srcs  []sourceState
}

// sourceState is one source in one partition: its progress h (ms), the
// clock when h last grew, the broker time of its last message there
// (seen), and whether it sent the partition an event since its last
// heartbeat (busy).
type sourceState struct {
	id            string
	h, grew, seen int64
	busy          bool
}

// source moves p's clock to broker time at (ms) of a message of source id
// and returns the source's index, adding it when p does not know it
// (steps 2 and 3 of the rule).
func (ps *partSources) source(id string, at int64) int {
	ps.clock = max(ps.clock, at)
	for i := range ps.srcs {
		if ps.srcs[i].id == id {
			ps.srcs[i].seen = at
			return i
		}
	}
	ps.srcs = append(ps.srcs, sourceState{id: id, grew: ps.clock, seen: at})
	return len(ps.srcs) - 1
}

// raise raises the progress of source i to v, noting the clock if it grows.
func (ps *partSources) raise(i int, v int64) {
	if s := &ps.srcs[i]; v > s.h {
		s.h, s.grew = v, ps.clock
	}
}

// event replays valid event d, already judged, in its partition: its
// source's progress rises to the event time, and the source is busy in
// the partition if busy is set (step 4).
func (b *Batch) event(d *judgedRecord, busy bool) {
	ps := &b.parts[d.part]
	i := ps.source(d.source, d.at)
	ps.raise(i, d.ms)
	if busy {
		ps.srcs[i].busy = true
	}
	b.settle(d.part, i, false)
}

// beat replays a heartbeat of source src at broker time at with progress
// t to partition p: the progress counts only if the source sent p no event
// since its previous heartbeat, or t is the end of stream, which also
// takes W_p there whatever other sources are live; a leaving heartbeat
// then removes the source from p.
func (b *Batch) beat(p int, src string, at, t int64, leave bool) {
	if p < 0 || p >= b.Partitions {
		return
	}
	b.Heartbeats++
	ps := &b.parts[p]
	i := ps.source(src, at)
	eos := t >= window.EndOfStream
	if !ps.srcs[i].busy || eos {
		ps.raise(i, t)
	}
	ps.srcs[i].busy = false
	b.settle(p, i, leave)
	if eos {
		b.wm[p] = window.Advance(b.wm[p], t, b.lateness)
	}
}

// settle ends a message of source cur in partition p (steps 5 and 6): W_p
// rises to the smallest progress of the live sources less lateness (and
// stays with none live), then cur is removed if it leaves, and every
// other source whose progress has not grown for the forget time is
// forgotten (a source's own messages never make it forget itself, so one
// source is never forgotten).
func (b *Batch) settle(p, cur int, leave bool) {
	ps := &b.parts[p]
	lo, live, forgot := int64(math.MaxInt64), false, false
	for i := range ps.srcs {
		age := ps.clock - ps.srcs[i].grew
		if age < b.idle {
			live, lo = true, min(lo, ps.srcs[i].h)
		}
		forgot = forgot || (i != cur && age >= b.forget)
	}
	if live {
		b.wm[p] = window.Advance(b.wm[p], lo, b.lateness)
	}
	if !leave && !forgot {
		return
	}
	kept := ps.srcs[:0]
	for i, s := range ps.srcs {
		if i == cur && !leave || i != cur && ps.clock-s.grew < b.forget {
			kept = append(kept, s)
		}
	}
	clear(ps.srcs[len(kept):])
	ps.srcs = kept
}

// SourceState is what a partition knows of one source after the records
// applied so far (docs/spec.md §3.1), for status and tests. Times are ms.
type SourceState struct {
	// ID is the source id (wire.SourceLegacy for RAW written without).
	ID string
	// Progress is the source's progress h in the partition, Grew the
	// partition's broker clock when it last grew, LastSeen the broker time
	// of the source's last message in the partition.
	Progress, Grew, LastSeen int64
	// Live: the source holds the partition's watermark (its progress grew
	// less than Config.SourceIdle of the partition's broker time ago).
	Live bool
}

// Sources returns the sources partition p knows, in the order they came
// (nil for a partition out of range).
func (b *Batch) Sources(p int) []SourceState {
	if p < 0 || p >= len(b.parts) {
		return nil
	}
	ps := &b.parts[p]
	out := make([]SourceState, len(ps.srcs))
	for i, s := range ps.srcs {
		out[i] = SourceState{ID: s.id, Progress: s.h, Grew: s.grew, LastSeen: s.seen, Live: ps.clock-s.grew < b.idle}
	}
	return out
}

// Watermark returns the partition watermarks W_p (ms) after the records
// applied so far, indexed by partition.
func (b *Batch) Watermark() []int64 { return slices.Clone(b.wm) }

// applyRecord applies the verdict on a record that is not a heartbeat.
func (b *Batch) applyRecord(d *judgedRecord) error {
	b.Records++
	if d.seq == 0 {
		d.seq = uint64(b.Records)
	}
	switch {
	case d.err != nil:
		return fmt.Errorf("reconcile: record %d: %w", d.line, d.err)
	case d.rej != nil:
		b.addRejection(*d.rej)
		return nil
	}
	n := d.line
	prev, slot := b.claims.find(d.hash, d.id)
	if prev != nil {
		if prev.fingerprint != d.fp {
			re := contract.Reject(contract.ReasonConflictingDuplicate, d.id,
				"event_id first claimed on line %d with different content", prev.line)
			b.addRejection(Rejection{Line: n, EventID: re.EventID, Reason: re.Reason, Detail: re.Detail,
				WindowID: window.ID(d.ms)})
			return nil
		}
		b.Valid++
		b.DuplicateCount++
		win := b.windowID(prev)
		dup := Duplicate{Line: n, EventID: d.id, FirstLine: prev.line, WindowID: win}
		b.Duplicates = append(b.Duplicates, dup)
		if w := b.Windows[win]; w != nil {
			w.Duplicates = append(w.Duplicates, dup)
		}
		if d.counts && b.horizon > 0 && b.wm[d.part] >= window.StartMs(d.ms)+window.WidthMs+b.grace+b.horizon {
			b.retiredRetries[d.id] = true
		}
		// Dedup comes first: a retry changes nothing, whatever its
		// lateness, but its source's progress; in a file it never reaches
		// RAW at all. An event of a type that never counts is not
		// deduplicated by the windower, so in RAW it makes its source busy.
		if !b.file {
			b.event(d, !d.counts)
		}
		return nil
	}
	b.Valid++
	c := claim{fingerprint: d.fp, line: n, block: b.block, at: uint32(d.idOff), n: uint32(d.idLen)}
	p := d.part
	// Every valid event is judged against W_p as it stands, then replayed
	// (b.event).
	wp := b.wm[p]
	if !d.counts {
		b.Other++
		b.claims.add(slot, d.hash, c)
		b.event(d, true)
		return nil
	}
	// Classification against W_p before the event (docs/spec.md §3).
	end := window.StartMs(d.ms) + window.WidthMs
	if b.horizon > 0 && wp >= end+b.grace+b.horizon {
		// Past the replay horizon: dropped without changing any window;
		// it raises its source's progress but does not make it busy.
		b.Counted++
		c.window = -b.windowRef(d.ms)
		b.claims.add(slot, d.hash, c)
		b.addLate(LateJudgment{EventID: d.id, WindowID: b.windowID(&c), Reason: wire.ReasonRetired,
			Watermark: window.Time(wp), Partition: p, Seq: d.seq, Line: d.fileLine})
		b.event(d, false)
		return nil
	}
	b.event(d, true)
	b.Counted++
	w := b.windowAt(d.ms)
	if window.Classify(wp, end, b.grace) == window.TooLate {
		c.window = -w.ref
		b.claims.add(slot, d.hash, c)
		lv := LateJudgment{EventID: d.id, WindowID: w.ID, Reason: wire.ReasonAfterGrace,
			Watermark: window.Time(wp), Partition: p, Seq: d.seq, Line: d.fileLine}
		w.LateDropped++
		w.Late = append(w.Late, lv)
		b.addLate(lv)
		return nil
	}
	if wp >= end {
		w.Corrections++
		b.Corrections++
		w.CorrectionIDs = append(w.CorrectionIDs, d.id)
	}
	w.Count++
	w.Digest.Merge(d.digest)
	w.IDs = append(w.IDs, d.id)
	w.ByPartition[p]++
	st := wire.StoreTotal{Store: d.store, Count: 1}
	if d.priced {
		st.AmountCents = d.amountCents
	} else {
		st.Unpriced = 1
	}
	wire.AddStore(w.Stores, st)
	b.InWindows++
	c.window = w.ref
	b.claims.add(slot, d.hash, c)
	return nil
}

// windowID is the id of the window c was counted in or judged too late
// for, "" for a claim that never counts.
func (b *Batch) windowID(c *claim) string {
	if c.window == 0 {
		return ""
	}
	return b.windowIDs[c.ref()-1]
}

// windowRef is the index plus one in windowIDs of the window holding
// event time ms, added when new.
func (b *Batch) windowRef(ms int64) int32 {
	start := window.StartMs(ms)
	if r, ok := b.refOf[start]; ok {
		return r
	}
	b.windowIDs = append(b.windowIDs, window.ID(ms))
	r := int32(len(b.windowIDs))
	b.refOf[start] = r
	return r
}

func (b *Batch) addLate(v LateJudgment) {
	b.lateOf[v.EventID] = len(b.Late)
	b.Late = append(b.Late, v)
}

// LateJudgmentOf returns the batch's too-late verdict on event id, if it
// judged the id too late.
func (b *Batch) LateJudgmentOf(id string) (LateJudgment, bool) {
	i, ok := b.lateOf[id]
	if !ok {
		return LateJudgment{}, false
	}
	return b.Late[i], true
}

// windowAt returns the window holding event time ms, created when new.
func (b *Batch) windowAt(ms int64) *WindowCount {
	start := window.StartMs(ms)
	if b.last != nil && b.lastStart == start {
		return b.last
	}
	w := b.byStart[start]
	if w == nil {
		bounds := window.Of(ms)
		// Sized like the window made before it, which traffic at a
		// steady rate fills about as much: growing the ids of every window
		// a quarter at a time would cost four times their size.
		var ids, stores int
		if prev := b.newest; prev != nil {
			ids, stores = len(prev.IDs)+len(prev.IDs)/4, len(prev.Stores)
		}
		w = &WindowCount{
			ID:          bounds.ID,
			Start:       window.Time(bounds.Start),
			End:         window.Time(bounds.End),
			IDs:         make([]string, 0, ids),
			ByPartition: make([]int64, b.Partitions),
			Stores:      make(map[string]wire.StoreTotal, stores),
			ref:         b.windowRef(ms),
		}
		b.Windows[bounds.ID] = w
		b.byStart[start] = w
		b.newest = w
	}
	b.last, b.lastStart = w, start
	return w
}

// addRejection appends a rejection row and indexes it by window.
func (b *Batch) addRejection(r Rejection) {
	b.Rejected = append(b.Rejected, r)
	if r.WindowID != "" {
		b.rejectedIn[r.WindowID] = append(b.rejectedIn[r.WindowID], len(b.Rejected)-1)
	}
}

// rejectionOf is the row of line n (raw, or what the pass kept of it)
// rejected with re before it was applied: the id and the window are read
// from raw when re has none.
func rejectionOf(n int, raw []byte, re *contract.RejectError) Rejection {
	r := Rejection{Line: n, EventID: re.EventID, Reason: re.Reason, Detail: re.Detail}
	if r.EventID == "" {
		r.EventID = contract.PeekEventID(raw)
	}
	if ms, ok := peekEventTime(raw); ok {
		r.WindowID = window.ID(ms)
	}
	return r
}

// minEventTime is 2000-01-01T00:00:00Z in ms, the earliest valid event time.
var minEventTime = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()

// peekEventTime reads the event time of a rejected record, if it has a
// readable one (occurred_at, else occurred_minute, not before 2000). It is
// best effort and only places rejections into windows for the report.
func peekEventTime(raw []byte) (int64, bool) {
	var rec struct {
		OccurredAt     *string      `json:"occurred_at"`
		OccurredMinute *json.Number `json:"occurred_minute"`
	}
	if err := json.Unmarshal(raw, &rec); err != nil {
		return 0, false
	}
	var ms int64
	switch {
	case rec.OccurredAt != nil:
		t, err := time.Parse(time.RFC3339Nano, *rec.OccurredAt)
		if err != nil {
			return 0, false
		}
		ms = t.UnixMilli()
	case rec.OccurredMinute != nil:
		m, err := strconv.ParseInt(rec.OccurredMinute.String(), 10, 64)
		if err != nil || m > (1<<53)/60000 {
			return 0, false
		}
		ms = m * 60000
	default:
		return 0, false
	}
	if ms < minEventTime || ms > window.EndOfStream {
		return 0, false
	}
	return ms, true
}

// WindowIDs returns the ids of the windows with counted submissions, in
// time order.
func (b *Batch) WindowIDs() []string {
	ids := make([]string, 0, len(b.Windows))
	for id := range b.Windows {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// RejectedIn returns the rejected records whose event time falls in the
// window id, in file order.
func (b *Batch) RejectedIn(id string) []Rejection {
	idx := b.rejectedIn[id]
	out := make([]Rejection, len(idx))
	for i, k := range idx {
		out[i] = b.Rejected[k]
	}
	return out
}

// RejectedByReason returns the number of rejected records per reason.
func (b *Batch) RejectedByReason() map[contract.Reason]int {
	m := make(map[contract.Reason]int)
	for _, r := range b.Rejected {
		m[r.Reason]++
	}
	return m
}

// CountedIn returns the window the batch counted event id in, and whether
// it did. A known id that does not count (or was never seen) returns false.
func (b *Batch) CountedIn(id string) (string, bool) {
	c, ok := b.claims.get(id)
	if !ok || !c.counted() {
		return "", false
	}
	return b.windowID(&c), true
}

// describe says what the batch made of event id, for explanations.
func (b *Batch) describe(id string) string {
	c, ok := b.claims.get(id)
	switch {
	case !ok:
		for _, r := range b.Rejected {
			if r.EventID == id {
				return fmt.Sprintf("the batch rejected it on line %d (%s)", r.Line, r.Reason)
			}
		}
		return "the batch never saw a valid record of it"
	case c.late():
		v, _ := b.LateJudgmentOf(id)
		return fmt.Sprintf("the batch judged it too late (%s) for window %s against watermark %s (record %d)",
			v.Reason, v.WindowID, v.Watermark.Format(time.RFC3339Nano), c.line)
	case c.window == 0:
		return fmt.Sprintf("the batch read it on line %d as an event that never counts", c.line)
	default:
		return fmt.Sprintf("the batch counted it in window %s (record %d)", b.windowID(&c), c.line)
	}
}
