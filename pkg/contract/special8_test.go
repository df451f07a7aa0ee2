package contract

import (
	"encoding/binary"
	"math/bits"
	"math/rand/v2"
	"testing"
)

// TestSpecial8: the 8-byte step of scanString finds the first byte that is
// not plain, as a byte by byte test does: every byte value in every
// position over every uniform fill, and random words.
func TestSpecial8(t *testing.T) {
	plain := func(c byte) bool { return c >= 0x20 && c < 0x80 && c != '"' && c != '\\' }
	check := func(b [8]byte) {
		first := 8
		for i, c := range b {
			if !plain(c) {
				first = i
				break
			}
		}
		m := special8(binary.LittleEndian.Uint64(b[:]))
		got := 8
		if m != 0 {
			got = bits.TrailingZeros64(m) >> 3
		}
		if got != first {
			t.Fatalf("special8(%q): first special byte %d, want %d", b, got, first)
		}
	}
	var b [8]byte
	for pos := range 8 {
		for fill := range 256 {
			for v := range 256 {
				for i := range b {
					b[i] = byte(fill)
				}
				b[pos] = byte(v)
				check(b)
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	pick := []byte{0, 0x1f, 0x20, 0x21, '"', 0x23, 0x5b, '\\', 0x5d, 0x7e, 0x7f, 0x80, 0xc3, 0xff, 'a', 'z'}
	for range 1 << 20 {
		for i := range b {
			if rng.IntN(2) == 0 {
				b[i] = pick[rng.IntN(len(pick))]
			} else {
				b[i] = byte(rng.IntN(256))
			}
		}
		check(b)
	}
}
