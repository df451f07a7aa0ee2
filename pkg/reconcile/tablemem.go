package reconcile

import (
	"runtime"
	"unsafe"
)

// The claim table's two arrays (the index and the claims) are the pass's
// largest allocations: 10 MB at 200,000 records, 2.5 GB at 50 million. They
// hold no pointers, so where the platform allows it (tablemem_linux.go)
// they live outside the Go heap, in mappings that ask for transparent huge
// pages: one page fault per 2 MB instead of one per 4 KB, and fewer TLB
// misses in the index's random probes. Elsewhere, and for small tables,
// they are ordinary slices.

// hugeBytes is the size from which a table is mapped: one huge page.
const hugeBytes = 2 << 20

// tableMem owns the mapped arrays of one claim table and unmaps them when
// the table is garbage (newClaimTable's cleanup) or replaced (grow). It
// never points back at the table, so the cleanup can run.
type tableMem struct {
	slots, list []byte
}

// free unmaps both arrays.
func (m *tableMem) free() {
	unmapTable(m.slots)
	unmapTable(m.list)
	m.slots, m.list = nil, nil
}

// tableOf returns n zeroed values of T, a pointer-free type, and the
// mapping behind them (nil when they are an ordinary slice).
func tableOf[T any](n int) ([]T, []byte) {
	var zero T
	size := uintptr(n) * unsafe.Sizeof(zero)
	if size < hugeBytes {
		return make([]T, n), nil
	}
	mem := mapTable(size)
	if mem == nil {
		return make([]T, n), nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(mem))), n), mem
}

// watch unmaps t's arrays once t is unreachable.
func (t *claimTable) watch() {
	runtime.AddCleanup(t, (*tableMem).free, t.mem)
}
