package contract

import (
	"errors"
	"fmt"
	"time"
)

// MinEventUnix is the earliest accepted event time, 2000-01-01T00:00:00Z,
// in seconds since the Unix epoch; an event that occurred before it is
// rejected bad_timestamp.
const MinEventUnix = 946684800

// minEventTime is MinEventUnix as a time.
var minEventTime = time.Unix(MinEventUnix, 0).UTC()

// MaxEventUnix is 9999-01-01T00:00:00Z in seconds since the Unix epoch: a
// time at or after it is not representable (docs/spec.md §2: year ≥ 9999)
// and is rejected bad_timestamp, as event time and as ingested_at. Every
// time the contract accepts, and the end of its window, stays within what
// RFC 3339 and Go's time encoders can write (years 0 to 9999), so no stage
// after the validator can fail on it.
const MaxEventUnix = 253370764800

// maxEventTime is MaxEventUnix as a time.
var maxEventTime = time.Unix(MaxEventUnix, 0).UTC()

// maxEventMinute is MaxEventUnix in minutes: the first occurred_minute of
// year 9999.
const maxEventMinute = MaxEventUnix / 60

// outOfRange describes why t, a parsed time, is not an accepted time of the
// contract, or returns "" when it is one: from 2000-01-01T00:00:00Z
// (inclusive) to 9999-01-01T00:00:00Z (exclusive).
func outOfRange(t time.Time) string {
	switch {
	case t.Before(minEventTime):
		return "is before " + minEventTime.Format(time.RFC3339)
	case !t.Before(maxEventTime):
		return "is in year 9999 or later, which is not representable"
	}
	return ""
}

// minEventMinute is MinEventUnix in minutes (the v1 schema's minimum of
// occurred_minute).
const minEventMinute = MinEventUnix / 60

// maxSafeInt is 2^53, the largest integer every JSON reader holds exactly.
const maxSafeInt = 1 << 53

// parseTimestamp parses an RFC 3339 date-time: YYYY-MM-DDTHH:MM:SS, an
// optional fraction of any length (kept to the nanosecond), then Z or an
// offset ±HH:MM. 't' and 'z' may be lower case (RFC 3339 section 5.6). With
// utcOnly the offset must be zero (Z, +00:00 or -00:00). A leap second
// (:60) is refused: Go time cannot hold it, and moving it would move the
// event into the next window. The result is in UTC. It takes the text as a
// string or as bytes (the fast path reads it in place) and allocates only
// for an error.
//
// Whatever it accepts, the JSON Schema format "date-time" of the schema
// library accepts too (fast.go relies on this): the same fixed layout, a
// stricter digit check, no leap second.
func parseTimestamp[S string | []byte](s S, utcOnly bool) (time.Time, error) {
	if len(s) < 20 {
		return time.Time{}, errors.New("too short for an RFC 3339 date-time")
	}
	num := func(i, n int) (int, bool) {
		v := 0
		for j := i; j < i+n; j++ {
			c := s[j]
			if c < '0' || c > '9' {
				return 0, false
			}
			v = v*10 + int(c-'0')
		}
		return v, true
	}
	year, ok1 := num(0, 4)
	month, ok2 := num(5, 2)
	day, ok3 := num(8, 2)
	hour, ok4 := num(11, 2)
	minute, ok5 := num(14, 2)
	sec, ok6 := num(17, 2)
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) || s[4] != '-' || s[7] != '-' ||
		(s[10] != 'T' && s[10] != 't') || s[13] != ':' || s[16] != ':' {
		return time.Time{}, errors.New("not in the form YYYY-MM-DDTHH:MM:SS")
	}
	if month < 1 || month > 12 || day < 1 || day > daysIn(year, month) {
		return time.Time{}, errors.New("no such date")
	}
	if hour > 23 || minute > 59 || sec > 60 {
		return time.Time{}, errors.New("no such time of day")
	}
	if sec == 60 {
		return time.Time{}, errors.New("leap seconds are not supported")
	}
	i := 19
	nsec := 0
	if i < len(s) && s[i] == '.' {
		i++
		digits := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			if digits < 9 {
				nsec = nsec*10 + int(s[i]-'0')
			}
			digits++
			i++
		}
		if digits == 0 {
			return time.Time{}, errors.New("no digits after the decimal point")
		}
		for d := digits; d < 9; d++ {
			nsec *= 10
		}
	}
	offset := 0
	switch {
	case i == len(s)-1 && (s[i] == 'Z' || s[i] == 'z'):
	case i == len(s)-6 && (s[i] == '+' || s[i] == '-') && s[i+3] == ':':
		oh, ok1 := num(i+1, 2)
		om, ok2 := num(i+4, 2)
		if !ok1 || !ok2 || oh > 23 || om > 59 {
			return time.Time{}, errors.New("bad UTC offset")
		}
		offset = (oh*60 + om) * 60
		if s[i] == '-' {
			offset = -offset
		}
		if utcOnly && offset != 0 {
			return time.Time{}, fmt.Errorf("offset %s is not UTC; write Z", s[i:])
		}
	default:
		return time.Time{}, errors.New("want Z or an offset ±HH:MM after the time")
	}
	t := time.Date(year, time.Month(month), day, hour, minute, sec, nsec, time.UTC)
	return t.Add(-time.Duration(offset) * time.Second), nil
}

// daysIn is the number of days of month in year (proleptic Gregorian).
func daysIn(year, month int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	default:
		return 31
	}
}
