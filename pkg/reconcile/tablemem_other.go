//go:build !linux

package reconcile

// mapTable maps nothing here: the claim table stays on the Go heap.
func mapTable(uintptr) []byte { return nil }

// unmapTable has nothing to unmap.
func unmapTable([]byte) {}
