package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
)

// A frame is one VALID message: the records of one RAW partition that one
// validator batch let through, in RAW order, each reduced to what the
// windower needs. The event bodies stay in RAW (a record's RawSeq finds
// its body there); VALID carries no copy of them.
//
// Layout (version 3), all integers varints (encoding/binary):
//
//	byte     FrameVersion
//	uvarint  source RAW partition
//	uvarint  record count
//	uvarint  source count S, then S times: uvarint len, source id bytes
//	per record:
//	  byte     kind (FrameSubmission, FrameOther, FrameHeartbeat)
//	  uvarint  RAW sequence − the previous record's (the first: absolute)
//	  varint   time ms − the previous record's (the first: absolute);
//	           the event time, or a heartbeat's source progress
//	  uvarint  index of the record's source id in the table above
//	  varint   broker time ms of its RAW message − the previous record's
//	  a heartbeat only: byte 1 when it is the source's last (leaves), else 0
//	  unless a heartbeat:
//	    uvarint  len, event id bytes
//	    byte     type code (typeCodes), or 0 then uvarint len, type bytes
//	    8 bytes  content fingerprint, little endian
//	    varint   window start hour − the record's time hour (always 0 for
//	             a frame the validator writes: kept so a reader can check it)
//	  a submission only (version 2 on):
//	    uvarint  len, store bytes (the event's partition_key)
//	    byte     1 when the amount follows (priced), else 0
//	    varint   amount in cents, when priced
//
// A version 1 frame has no store and no amount: its submissions read with
// Store "" and unpriced, and a window's breakdown files them under
// UnknownStore. Frames before version 3 have no sources and no broker
// times: their records read as the one legacy source (SourceLegacy) at
// broker time 0, which with one source changes no watermark.
// A reader accepts every version up to FrameVersion and refuses newer ones
// (ErrFrameVersion): a windower older than its validator stops instead of
// misreading.

// FrameVersion is the version this code writes.
const FrameVersion = 3

// HdrFrame marks a VALID message whose body is a frame; its value is the
// frame's version. A VALID message without it is one event as the releases
// before frames wrote it (HdrKind, HdrTime, HdrEventID).
const HdrFrame = "Rf-Frame"

// Record kinds in a frame.
const (
	FrameSubmission = 's'
	FrameOther      = 'o'
	FrameHeartbeat  = 'h'
)

// ErrFrameVersion: the frame was written by a newer validator.
var ErrFrameVersion = errors.New("wire: frame version not supported")

// ErrFrame: the bytes are not a frame.
var ErrFrame = errors.New("wire: malformed frame")

// typeCodes are the event types a frame writes as one byte (1-based).
var typeCodes = []string{"submitted", "draft_saved", "viewed"}

// FrameRecord is one record of a frame.
type FrameRecord struct {
	Kind   byte
	RawSeq uint64
	// Time is the event time in ms since the epoch, or a heartbeat's
	// source progress.
	Time        int64
	EventID     string
	Type        string
	Fingerprint uint64
	// Store is a submission's partition_key, the key of the window's
	// breakdown ("" in a version 1 frame).
	Store string
	// AmountCents is the submission's payload.amount_cents when Priced
	// (contract.AmountCents).
	AmountCents int64
	Priced      bool
	// SourceID is the id of the source that wrote the record to RAW
	// (HdrSource), Received the broker's timestamp of its RAW message in
	// ms, and Leave marks a source's last heartbeat (HdrLeave).
	SourceID string
	Received int64
	Leave    bool
}

// Frame is the decoded body of a frame message.
type Frame struct {
	// Partition is the RAW partition the records come from.
	Partition int
	Records   []FrameRecord
}

// FrameMsgID is the Nats-Msg-Id of the frame of RAW partition p holding the
// records from RAW sequence first to last: a frame published again for the
// same records (a validator that crashed before its ack) is a JetStream
// duplicate. The '/' is outside the event id alphabet: no message id of
// an event (RAW, or VALID as written before frames) can equal it.
func FrameMsgID(p int, first, last uint64) string {
	return "vf/" + strconv.Itoa(p) + "/" + strconv.FormatUint(first, 10) + "-" + strconv.FormatUint(last, 10)
}

const hourMs = 3600 * 1000

func hourOf(ms int64) int64 {
	h := ms / hourMs
	if ms%hourMs < 0 {
		h--
	}
	return h
}

// AppendFrame appends the encoding of f to dst.
func AppendFrame(dst []byte, f *Frame) []byte {
	dst = append(dst, FrameVersion)
	dst = binary.AppendUvarint(dst, uint64(f.Partition))
	dst = binary.AppendUvarint(dst, uint64(len(f.Records)))
	// The source table: a frame's records come from few sources.
	var table []string
	index := make([]int, len(f.Records))
	for i := range f.Records {
		id := f.Records[i].SourceID
		j := slices.Index(table, id)
		if j < 0 {
			j = len(table)
			table = append(table, id)
		}
		index[i] = j
	}
	dst = binary.AppendUvarint(dst, uint64(len(table)))
	for _, id := range table {
		dst = binary.AppendUvarint(dst, uint64(len(id)))
		dst = append(dst, id...)
	}
	var prevSeq uint64
	var prevTime, prevReceived int64
	for i := range f.Records {
		r := &f.Records[i]
		dst = append(dst, r.Kind)
		dst = binary.AppendUvarint(dst, r.RawSeq-prevSeq)
		dst = binary.AppendVarint(dst, r.Time-prevTime)
		dst = binary.AppendUvarint(dst, uint64(index[i]))
		dst = binary.AppendVarint(dst, r.Received-prevReceived)
		prevSeq, prevTime, prevReceived = r.RawSeq, r.Time, r.Received
		if r.Kind == FrameHeartbeat {
			if r.Leave {
				dst = append(dst, 1)
			} else {
				dst = append(dst, 0)
			}
			continue
		}
		dst = binary.AppendUvarint(dst, uint64(len(r.EventID)))
		dst = append(dst, r.EventID...)
		code := 0
		for j, t := range typeCodes {
			if t == r.Type {
				code = j + 1
				break
			}
		}
		dst = append(dst, byte(code))
		if code == 0 {
			dst = binary.AppendUvarint(dst, uint64(len(r.Type)))
			dst = append(dst, r.Type...)
		}
		dst = binary.LittleEndian.AppendUint64(dst, r.Fingerprint)
		dst = binary.AppendVarint(dst, 0) // window hour − time hour
		if r.Kind == FrameSubmission {
			dst = binary.AppendUvarint(dst, uint64(len(r.Store)))
			dst = append(dst, r.Store...)
			if r.Priced {
				dst = append(dst, 1)
				dst = binary.AppendVarint(dst, r.AmountCents)
			} else {
				dst = append(dst, 0)
			}
		}
	}
	return dst
}

// frameReader reads a frame's fields, remembering the first error.
type frameReader struct {
	b   []byte
	err error
}

func (r *frameReader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", ErrFrame, what)
	}
}

func (r *frameReader) byte1(what string) byte {
	if r.err != nil || len(r.b) == 0 {
		r.fail("no " + what)
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *frameReader) uvarint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("bad " + what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *frameReader) varint(what string) int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail("bad " + what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *frameReader) str(what string) string {
	n := r.uvarint(what + " length")
	if r.err != nil {
		return ""
	}
	if n > uint64(len(r.b)) {
		r.fail(what + " longer than the frame")
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

// DecodeFrame decodes a frame of any version up to FrameVersion.
func DecodeFrame(b []byte) (Frame, error) {
	var f Frame
	if len(b) == 0 {
		return f, fmt.Errorf("%w: empty", ErrFrame)
	}
	version := b[0]
	if version == 0 || version > FrameVersion {
		return f, fmt.Errorf("%w: version %d (this reader knows 1 to %d)", ErrFrameVersion, version, FrameVersion)
	}
	r := &frameReader{b: b[1:]}
	part := r.uvarint("partition")
	n := r.uvarint("record count")
	if r.err != nil {
		return Frame{}, r.err
	}
	if part > 1<<20 {
		return Frame{}, fmt.Errorf("%w: partition %d", ErrFrame, part)
	}
	// Every record takes at least 3 bytes: a count beyond that is a lie,
	// and must not make the reader allocate it.
	if n > uint64(len(r.b))/3 {
		return Frame{}, fmt.Errorf("%w: %d records in %d bytes", ErrFrame, n, len(r.b))
	}
	f.Partition = int(part)
	var table []string
	if version >= 3 {
		ns := r.uvarint("source count")
		if ns > uint64(len(r.b)) {
			r.fail("source count " + strconv.FormatUint(ns, 10))
		}
		if r.err != nil {
			return Frame{}, r.err
		}
		table = make([]string, ns)
		for j := range table {
			table[j] = r.str("source id")
		}
	}
	f.Records = make([]FrameRecord, n)
	var seq uint64
	var t, received int64
	for i := range f.Records {
		rec := &f.Records[i]
		rec.Kind = r.byte1("record kind")
		seq += r.uvarint("RAW sequence")
		t += r.varint("time")
		rec.RawSeq, rec.Time = seq, t
		if version >= 3 {
			j := r.uvarint("source index")
			received += r.varint("broker time")
			if r.err == nil && j >= uint64(len(table)) {
				r.fail("record " + strconv.Itoa(i) + " has source index " + strconv.FormatUint(j, 10))
			}
			if r.err == nil {
				rec.SourceID, rec.Received = table[j], received
			}
		}
		if r.err != nil {
			return Frame{}, r.err
		}
		switch rec.Kind {
		case FrameHeartbeat:
			if version >= 3 {
				switch r.byte1("leave flag") {
				case 0:
				case 1:
					rec.Leave = true
				default:
					r.fail("record " + strconv.Itoa(i) + " has a bad leave flag")
				}
				if r.err != nil {
					return Frame{}, r.err
				}
			}
			continue
		case FrameSubmission, FrameOther:
		default:
			return Frame{}, fmt.Errorf("%w: record %d has kind %q", ErrFrame, i, rec.Kind)
		}
		rec.EventID = r.str("event id")
		switch code := r.byte1("type code"); {
		case code == 0:
			rec.Type = r.str("type")
		case int(code) <= len(typeCodes):
			rec.Type = typeCodes[code-1]
		default:
			r.fail("type code " + strconv.Itoa(int(code)))
		}
		if r.err == nil && len(r.b) < 8 {
			r.fail("no fingerprint")
		}
		if r.err != nil {
			return Frame{}, r.err
		}
		rec.Fingerprint = binary.LittleEndian.Uint64(r.b)
		r.b = r.b[8:]
		if d := r.varint("window"); r.err == nil && d != 0 {
			return Frame{}, fmt.Errorf("%w: record %d (%s) is filed in window hour %d, its time is in hour %d",
				ErrFrame, i, rec.EventID, hourOf(t)+d, hourOf(t))
		}
		if version >= 2 && rec.Kind == FrameSubmission {
			rec.Store = r.str("store")
			switch r.byte1("priced flag") {
			case 0:
			case 1:
				rec.AmountCents, rec.Priced = r.varint("amount"), true
			default:
				r.fail("record " + strconv.Itoa(i) + " has a bad priced flag")
			}
		}
		if rec.EventID == "" {
			r.fail("record " + strconv.Itoa(i) + " has no event id")
		}
	}
	if r.err != nil {
		return Frame{}, r.err
	}
	if len(r.b) != 0 {
		return Frame{}, fmt.Errorf("%w: %d bytes after the last record", ErrFrame, len(r.b))
	}
	return f, nil
}
