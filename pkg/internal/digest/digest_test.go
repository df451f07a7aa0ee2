package digest

import (
	"hash/fnv"
	"strings"
	"testing"
)

// TestHalvesAreFNV1a: Halves splits the 64-bit FNV-1a hash of the id into
// its high and low words; the FNV-1a value of the empty string is the
// offset basis cbf29ce484222325, and "a" hashes to af63dc4c8601ec8c (the
// published test vectors), so the Lua side can reproduce them.
func TestHalvesAreFNV1a(t *testing.T) {
	for _, c := range []struct {
		id     string
		hi, lo uint32
	}{
		{"", 0xcbf29ce4, 0x84222325},
		{"a", 0xaf63dc4c, 0x8601ec8c},
		{"foobar", 0x85944171, 0xf73967e8},
	} {
		hi, lo := Halves(c.id)
		if hi != c.hi || lo != c.lo {
			t.Errorf("Halves(%q) = %08x %08x, want %08x %08x", c.id, hi, lo, c.hi, c.lo)
		}
		h := fnv.New64a()
		h.Write([]byte(c.id))
		if got := uint64(hi)<<32 | uint64(lo); got != h.Sum64() {
			t.Errorf("Halves(%q) joined = %016x, hash/fnv says %016x", c.id, got, h.Sum64())
		}
	}
}

// TestKnownDigest: the digest of a fixed set is the wrapping sum of the
// halves, written hi then lo as 16 hex digits.
func TestKnownDigest(t *testing.T) {
	var d Digest
	if got := d.String(); got != "0000000000000000" {
		t.Fatalf("empty digest = %s", got)
	}
	d.Add("a")
	if got := d.String(); got != "af63dc4c8601ec8c" {
		t.Fatalf("digest{a} = %s, want af63dc4c8601ec8c", got)
	}
	d.Add("foobar")
	// hi: af63dc4c + 85944171 = 1 34f81dbd -> 34f81dbd (mod 2^32)
	// lo: 8601ec8c + f73967e8 = 1 7d3b5474 -> 7d3b5474
	if got := d.String(); got != "34f81dbd7d3b5474" {
		t.Fatalf("digest{a, foobar} = %s, want 34f81dbd7d3b5474 (sums wrap mod 2^32)", got)
	}
}

// TestOrderIndependentAndInverse: the digest depends on the set of ids, not
// the order they were added in; Remove undoes Add; Merge equals adding the
// other set's ids one by one; a different set gives a different digest.
func TestOrderIndependentAndInverse(t *testing.T) {
	ids := []string{"evt-1", "evt-2", "evt-3", "evt-4", "evt-5"}
	var fwd, rev Digest
	for i := range ids {
		fwd.Add(ids[i])
		rev.Add(ids[len(ids)-1-i])
	}
	if fwd != rev {
		t.Fatalf("order changed the digest: %s vs %s", fwd, rev)
	}
	var other Digest
	for _, id := range []string{"evt-1", "evt-2", "evt-3", "evt-4", "evt-6"} {
		other.Add(id)
	}
	if other == fwd {
		t.Fatalf("different sets gave the same digest %s", fwd)
	}
	d := fwd
	d.Add("evt-extra")
	if d == fwd {
		t.Fatal("Add changed nothing")
	}
	d.Remove("evt-extra")
	if d != fwd {
		t.Fatalf("Remove did not undo Add: %s vs %s", d, fwd)
	}
	var a, b Digest
	a.Add("evt-1")
	a.Add("evt-2")
	b.Add("evt-3")
	b.Add("evt-4")
	b.Add("evt-5")
	a.Merge(b)
	if a != fwd {
		t.Fatalf("Merge: %s, want %s", a, fwd)
	}
	var empty Digest
	for _, id := range ids {
		fwd.Remove(id)
	}
	if fwd != empty {
		t.Fatalf("removing every id left %s", fwd)
	}
}

// TestParseRoundTrip: Parse reads String's form back, and refuses anything
// that is not exactly 16 hex digits.
func TestParseRoundTrip(t *testing.T) {
	var d Digest
	for _, id := range []string{"x", "y", "z"} {
		d.Add(id)
	}
	got, err := Parse(d.String())
	if err != nil || got != d {
		t.Fatalf("Parse(%s) = %v, %v; want %v", d, got, err, d)
	}
	if got, err := Parse("FFFFFFFF00000001"); err != nil || got != (Digest{Hi: 0xffffffff, Lo: 1}) {
		t.Fatalf("Parse upper case = %v, %v", got, err)
	}
	for _, bad := range []string{"", "abc", strings.Repeat("0", 15), strings.Repeat("0", 17), "000000000000000g", "-000000000000001"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}
