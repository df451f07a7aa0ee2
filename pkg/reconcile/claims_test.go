package reconcile

import (
	"runtime"
	"strconv"
	"testing"
)

// fillClaims adds n claims with ids id-0 … id-(n-1) to t, each in a block
// of its own, with its number as fingerprint and line.
func fillClaims(t *testing.T, tab *claimTable, n int) {
	t.Helper()
	for i := range n {
		id := "id-" + strconv.Itoa(i)
		h := tab.hash([]byte(id))
		c, slot := tab.find(h, id)
		if c != nil {
			t.Fatalf("%s found before it was added", id)
		}
		blk, err := tab.addBlock(id)
		if err != nil {
			t.Fatal(err)
		}
		tab.add(slot, h, claim{fingerprint: uint64(i), line: i, block: blk, n: uint32(len(id))})
	}
}

// checkClaims reads every claim fillClaims added back.
func checkClaims(t *testing.T, tab *claimTable, n int) {
	t.Helper()
	for i := range n {
		id := "id-" + strconv.Itoa(i)
		c, ok := tab.get(id)
		if !ok || c.fingerprint != uint64(i) || c.line != i || tab.id(&c) != id {
			t.Fatalf("%s: got %+v (found %v)", id, c, ok)
		}
	}
	if _, ok := tab.get("id-" + strconv.Itoa(n)); ok {
		t.Fatalf("id-%d found, never added", n)
	}
}

// TestClaimTableGrowsOutOfTheHeap: a table that starts small and grows past
// a huge page moves its index and its claims into mapped memory (on Linux)
// and loses none of them on the way; one sized for its claims up front
// keeps them when they outgrow the estimate.
func TestClaimTableGrowsOutOfTheHeap(t *testing.T) {
	const n = 300_000 // index 512k slots (4 MB), claims 9.6 MB: both mapped
	t.Run("from empty", func(t *testing.T) {
		tab := newClaimTable(0)
		if tab.mem.slots != nil || tab.mem.list != nil {
			t.Fatal("an empty table is mapped")
		}
		fillClaims(t, tab, n)
		checkClaims(t, tab, n)
		if runtime.GOOS == "linux" && (tab.mem.slots == nil || tab.mem.list == nil) {
			t.Fatalf("%d claims: index mapped %v, claims mapped %v", n, tab.mem.slots != nil, tab.mem.list != nil)
		}
	})
	t.Run("estimate too low", func(t *testing.T) {
		tab := newClaimTable(n / 4)
		if runtime.GOOS == "linux" && tab.mem.list == nil {
			t.Fatal("a table for 75,000 claims is not mapped")
		}
		fillClaims(t, tab, n)
		checkClaims(t, tab, n)
		runtime.GC() // the arrays grow replaced are unmapped; the live ones still read
		checkClaims(t, tab, n)
	})
}
