package reconcile

import (
	"errors"
	"hash/maphash"
	"math"
)

// claim is what the batch remembers of the first valid record of an
// event_id. It holds no pointers, so that the garbage collector never reads
// the million of them: its id is placed in the table's blocks.
type claim struct {
	fingerprint uint64
	line        int
	// The id is blocks[block][at:at+n].
	block, at, n uint32
	// window is the window the claim was counted in (window > 0) or
	// judged too late for (window < 0): an index into Batch.windowIDs
	// plus one, negated when too late; 0 for an event that never counts.
	window int32
}

// counted reports whether the claim was counted in a window, late whether
// it was judged too late for one; ref is that window's index plus one.
func (c *claim) counted() bool { return c.window > 0 }
func (c *claim) late() bool    { return c.window < 0 }
func (c *claim) ref() int32    { return max(c.window, -c.window) }

// claimTable holds the claim of every event id read, in claim order, and
// finds them by id through an open-addressing index over the ids' hashes.
// The hashes are worked out beside validation (judge.record), so the
// ordered apply only probes. Not safe for concurrent use.
type claimTable struct {
	seed maphash.Seed
	// slots is the index: 0 for an empty slot, else the top bits of the
	// id's hash above the claim's position in list plus one (posBits).
	slots []uint64
	list  []claim
	// blocks hold the claimed ids: the ids of a chunk of a file
	// (judge.chunk), shared with the windows' IDs, or of one record.
	blocks []string
	// touched keeps touch's loads from being dropped.
	touched uint64
	// mem owns slots and list where they are mapped (tablemem.go).
	mem *tableMem
}

const (
	posBits = 40
	posMask = 1<<posBits - 1
	// minSlots is the smallest index (a power of two).
	minSlots = 1 << 10
)

// newClaimTable returns a table sized for about n claims.
func newClaimTable(n int) *claimTable {
	size := minSlots
	for size*3 < n*4 {
		size *= 2
	}
	t := &claimTable{seed: maphash.MakeSeed(), mem: &tableMem{}}
	t.slots, t.mem.slots = tableOf[uint64](size)
	t.list, t.mem.list = tableOf[claim](max(n, minSlots))
	t.list = t.list[:0]
	t.watch()
	return t
}

// hash is the hash of event id the table is indexed by.
func (t *claimTable) hash(id []byte) uint64 { return maphash.Bytes(t.seed, id) }

// find returns the claim of id, whose hash is h, or nil and the slot to
// add it at.
func (t *claimTable) find(h uint64, id string) (*claim, int) {
	mask := uint64(len(t.slots) - 1)
	tag := h >> posBits
	for i := h & mask; ; i = (i + 1) & mask {
		s := t.slots[i]
		if s == 0 {
			return nil, int(i)
		}
		if s>>posBits == tag {
			if c := &t.list[s&posMask-1]; t.id(c) == id {
				return c, 0
			}
		}
	}
}

// touch reads the index slots the valid records of vs will look up, so
// that their cache misses overlap instead of stalling each lookup in turn.
func (t *claimTable) touch(vs []judgedRecord) {
	mask := uint64(len(t.slots) - 1)
	var sum uint64
	for i := range vs {
		sum += t.slots[vs[i].hash&mask]
	}
	t.touched = sum
}

// id returns the id of c.
func (t *claimTable) id(c *claim) string { return t.blocks[c.block][c.at : c.at+c.n] }

// addBlock adds a block of ids the next claims are placed in, and returns
// its index.
func (t *claimTable) addBlock(ids string) (uint32, error) {
	if len(t.blocks) == math.MaxUint32 || len(ids) > math.MaxUint32 {
		return 0, errors.New("reconcile: too many event ids for the claim table")
	}
	t.blocks = append(t.blocks, ids)
	return uint32(len(t.blocks) - 1), nil
}

// get returns the claim of id, if any.
func (t *claimTable) get(id string) (claim, bool) {
	c, _ := t.find(maphash.String(t.seed, id), id)
	if c == nil {
		return claim{}, false
	}
	return *c, true
}

// add adds c, whose id has hash h, at slot (from find), growing the index
// when it is three quarters full.
func (t *claimTable) add(slot int, h uint64, c claim) {
	if len(t.list) == cap(t.list) {
		t.growList()
	}
	t.list = append(t.list, c)
	t.slots[slot] = h>>posBits<<posBits | uint64(len(t.list))
	if len(t.list)*4 >= len(t.slots)*3 {
		t.grow()
	}
}

// growList doubles the room for claims (the table's memory, not append's,
// so that a mapped list stays mapped).
func (t *claimTable) growList() {
	list, mem := tableOf[claim](2 * cap(t.list))
	t.list = list[:copy(list, t.list)]
	unmapTable(t.mem.list)
	t.mem.list = mem
}

// grow doubles the index and places every claim again.
func (t *claimTable) grow() {
	slots, mem := tableOf[uint64](2 * len(t.slots))
	unmapTable(t.mem.slots)
	t.slots, t.mem.slots = slots, mem
	mask := uint64(len(t.slots) - 1)
	for n := range t.list {
		h := maphash.String(t.seed, t.id(&t.list[n]))
		i := h & mask
		for t.slots[i] != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = h>>posBits<<posBits | uint64(n+1)
	}
}
