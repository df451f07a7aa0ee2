package reconcile

import (
	"time"

	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/internal/digest"
	"github.com/receiptflow/receiptflow/pkg/window"
)

// verdict is what the pass makes of one record before applying it: the
// part that depends on the record alone (validation, the rejection row, the
// partition), which Count works out on several goroutines. Applying it
// (claims, duplicates, conflicts, counts) depends on the records before it
// and happens in order, in Batch.apply.
type judgedRecord struct {
	line int
	// err is a validator error that is not a rejection.
	err error
	// rej is the row of a record rejected before it is applied.
	rej *Rejection
	// A valid record's event id, fingerprint, event time (ms) and
	// partition (whether it counts: counts, below).
	id string
	fp uint64
	// hash is the id's hash in the claim table; digest the id's digest,
	// for a submission.
	hash   uint64
	digest digest.Digest
	ms     int64
	part   int
	// A submission's store (its partition_key) and amount (if priced,
	// below), for the window's breakdown.
	store       string
	amountCents int64
	// idOff and idLen place id in the ids of its chunk (judge.chunk),
	// or of its record.
	idOff, idLen int
	// seq is the record's RAW sequence (0 in a file: its record number is
	// used), fileLine its line in a file (0 for RAW).
	seq      uint64
	fileLine int
	// source is the id of the record's source, at its broker time (ms):
	// a file's records are the legacy source's, at Config.DefaultIngestedAt.
	source string
	at     int64
	// A heartbeat's RAW partition and progress (ms).
	rawPart  int
	progress int64
	// The flags, side by side to keep the verdicts of a chunk small:
	// counts, priced as above; checked: the record passed the contract
	// check (a valid record, or a conflicting duplicate), so ingest counts
	// its event time as progress; heartbeat marks a heartbeat, leave its
	// source's last.
	counts, priced, checked bool
	heartbeat, leave        bool
}

// maxCachedKeys bounds the partition-key cache of a judge.
const maxCachedKeys = 4096

// judge works out verdicts. It is not safe for concurrent use: each
// goroutine has its own.
type judge struct {
	v          *contract.Validator
	partitions int
	maxLine    int
	// parts caches the partition of the partition keys met.
	parts map[string]int
	// stores interns the partition keys of submissions (judge.store).
	stores map[string]string
	// hot are the declared hot keys, routed by event id (window.Route).
	hot window.HotKeys
	// claims hashes the event ids for the batch's claim table.
	claims *claimTable
	c      contract.Checked
}

func newJudge(v *contract.Validator, partitions, maxLine int) *judge {
	return &judge{v: v, partitions: partitions, maxLine: maxLine, parts: make(map[string]int), stores: make(map[string]string)}
}

// newJudge returns a judge for the records of b, cutting lines at maxLine.
func (b *Batch) newJudge(maxLine int) *judge {
	j := newJudge(b.validator, b.Partitions, maxLine)
	j.hot, j.claims = b.hot, b.claims
	return j
}

// setID sets the event id of the valid record d.
func (d *judgedRecord) setID(id string) {
	d.id = id
	if d.counts {
		d.digest.Add(id)
	}
}

// record fills d with the verdict on raw, line n, and returns the event id
// of a valid record (sharing memory with raw), else nil.
func (j *judge) record(d *judgedRecord, n int, raw []byte, defaultIngestedAt time.Time) []byte {
	d.line = n
	if err := j.v.Check(raw, defaultIngestedAt, &j.c); err != nil {
		re, ok := contract.AsReject(err)
		if !ok {
			d.err = err
			return nil
		}
		r := rejectionOf(n, raw, re)
		d.rej = &r
		return nil
	}
	c := &j.c
	d.checked = true
	d.at = defaultIngestedAt.UnixMilli()
	d.fp = c.Fingerprint
	d.hash = j.claims.hash(c.EventID)
	d.counts = c.Counts()
	d.ms = window.Ms(c.OccurredAt)
	// Every valid event moves its partition's watermark, so every one
	// needs its partition (the VALID partition the validator routes it
	// to).
	d.part = j.partition(c.PartitionKey, c.EventID)
	if d.counts {
		d.store = j.store(c.PartitionKey)
		d.amountCents, d.priced = c.AmountCents, c.Priced
	}
	return c.EventID
}

// raw fills d with the verdict on the RAW record r. The contract check
// gets the broker's receive time of the record.
func (j *judge) raw(d *judgedRecord, r *Record) {
	d.seq = r.Seq
	d.fileLine = r.Line
	n := r.Line
	if n == 0 {
		n = int(r.Seq)
	}
	d.source = r.Source
	if r.Heartbeat {
		d.line, d.heartbeat, d.rawPart, d.progress = n, true, r.Partition, r.Progress
		d.at, d.leave = r.Received.UnixMilli(), r.Leave
		return
	}
	if r.Size > len(r.Data) {
		j.tooLong(d, n, r.Data, r.Size)
		return
	}
	if id := j.record(d, n, r.Data, r.Received); id != nil {
		d.setID(string(id))
	}
}

// partition is window.Route of the event, cached by key for the keys
// that are not hot.
func (j *judge) partition(key, eventID []byte) int {
	if j.hot[string(key)] > 0 {
		return window.Route(string(key), string(eventID), j.partitions, j.hot)
	}
	if p, ok := j.parts[string(key)]; ok {
		return p
	}
	p := window.Partition(string(key), j.partitions)
	if len(j.parts) < maxCachedKeys {
		j.parts[string(key)] = p
	}
	return p
}

// store is key as a string, shared by the records of one key for the
// keys met first (a cache as big as the partitions').
func (j *judge) store(key []byte) string {
	if s, ok := j.stores[string(key)]; ok {
		return s
	}
	s := string(key)
	if len(j.stores) < maxCachedKeys {
		j.stores[s] = s
	}
	return s
}

// tooLong is the verdict on line n, cut at the pass's limit: too_large.
func (j *judge) tooLong(d *judgedRecord, n int, kept []byte, size int) {
	d.line = n
	limit := j.maxLine
	if limit == 0 {
		limit = len(kept)
	}
	r := rejectionOf(n, kept, contract.Reject(contract.ReasonTooLarge, "",
		"record is %d bytes, over the %d the pass reads", size, limit))
	d.rej = &r
}

// chunk works out the verdicts on the lines of ch. The event ids of its
// valid records become one string, cut into each verdict's id.
func (j *judge) chunk(ch *chunk, defaultIngestedAt time.Time) {
	ch.verdicts = ch.verdicts[:0]
	ids := ch.ids[:0]
	for _, l := range ch.lines {
		ch.verdicts = append(ch.verdicts, judgedRecord{})
		d := &ch.verdicts[len(ch.verdicts)-1]
		raw := ch.data[l.start:l.end]
		d.fileLine = l.n
		if l.cut {
			j.tooLong(d, l.n, raw, l.size)
			continue
		}
		if id := j.record(d, l.n, raw, defaultIngestedAt); id != nil {
			d.idOff, d.idLen = len(ids), len(id)
			ids = append(ids, id...)
		}
	}
	all := string(ids)
	for i := range ch.verdicts {
		if d := &ch.verdicts[i]; d.idLen > 0 {
			d.setID(all[d.idOff : d.idOff+d.idLen])
		}
	}
	ch.ids, ch.idBlock = ids, all
}
