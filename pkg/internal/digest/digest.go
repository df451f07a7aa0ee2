// Package digest is the order-independent replay-safety digest of the event
// ids counted into a window: two 32-bit sums (mod 2^32) of the two halves of
// each id's 64-bit FNV-1a hash. Sums, not XOR, because Redis Lua numbers are
// doubles without bit operations; sums mod 2^32 stay exact in a double.
package digest

import (
	"fmt"
	"hash/fnv"
	"strconv"
)

// Digest is the digest of a set of event ids. The zero value is the empty set.
type Digest struct {
	Hi uint32 `json:"hi"`
	Lo uint32 `json:"lo"`
}

// Halves returns the two 32-bit halves of the 64-bit FNV-1a hash of id.
func Halves(id string) (hi, lo uint32) {
	h := fnv.New64a()
	h.Write([]byte(id))
	s := h.Sum64()
	return uint32(s >> 32), uint32(s)
}

// Add adds id to d.
func (d *Digest) Add(id string) {
	hi, lo := Halves(id)
	d.Hi += hi
	d.Lo += lo
}

// Remove removes id from d (the inverse of Add).
func (d *Digest) Remove(id string) {
	hi, lo := Halves(id)
	d.Hi -= hi
	d.Lo -= lo
}

// Merge adds every id of o to d.
func (d *Digest) Merge(o Digest) {
	d.Hi += o.Hi
	d.Lo += o.Lo
}

// String is the 16-hex-digit form used in snapshots: hi then lo.
func (d Digest) String() string { return fmt.Sprintf("%08x%08x", d.Hi, d.Lo) }

// Parse reads the String form.
func Parse(s string) (Digest, error) {
	if len(s) != 16 {
		return Digest{}, fmt.Errorf("digest: want 16 hex digits, got %q", s)
	}
	v, err := strconv.ParseUint(s, 16, 64)
	if err != nil {
		return Digest{}, fmt.Errorf("digest: %w", err)
	}
	return Digest{Hi: uint32(v >> 32), Lo: uint32(v)}, nil
}
