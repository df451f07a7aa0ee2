package reconcile

import "syscall"

// madvHugepage is MADV_HUGEPAGE (the syscall package does not name it).
const madvHugepage = 14

// mapTable maps size bytes of zeroed anonymous memory and asks for
// transparent huge pages over it (honoured when the system's THP mode is
// "madvise" or "always"); nil when the mapping fails, and the caller uses
// the Go heap instead.
func mapTable(size uintptr) []byte {
	mem, err := syscall.Mmap(-1, 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil
	}
	_ = syscall.Madvise(mem, madvHugepage) // a hint: without it the pages are 4 KB
	return mem
}

// unmapTable unmaps what mapTable mapped (nothing for nil).
func unmapTable(mem []byte) {
	if mem != nil {
		_ = syscall.Munmap(mem)
	}
}
