package lease

import (
	"cmp"
	"slices"
)

// Assign returns the target owner of every partition 0..partitions-1 over
// the live members (any order), given the current holders (partition →
// member; holders that are not members count as absent). Each member gets
// ceil or floor of partitions/len(members); the members holding the most
// get the larger shares, and each keeps its lowest-numbered held
// partitions up to its share, so a settled group moves nothing. The
// result is the same for the same arguments; nil without members.
func Assign(partitions int, members []string, holders map[int]string) map[int]string {
	if len(members) == 0 {
		return nil
	}
	ms := slices.Clone(members)
	slices.Sort(ms)
	ms = slices.Compact(ms)
	held := map[string]int{}
	for p, m := range holders {
		if p >= 0 && p < partitions {
			held[m]++
		}
	}
	byHeld := slices.Clone(ms)
	slices.SortStableFunc(byHeld, func(a, b string) int { return cmp.Compare(held[b], held[a]) })
	quota := map[string]int{}
	n := len(ms)
	for i, m := range byHeld {
		quota[m] = partitions / n
		if i < partitions%n {
			quota[m]++
		}
	}
	out := make(map[int]string, partitions)
	for p := 0; p < partitions; p++ {
		if m, ok := holders[p]; ok && quota[m] > 0 {
			out[p] = m
			quota[m]--
		}
	}
	next := 0
	for p := 0; p < partitions; p++ {
		if _, ok := out[p]; ok {
			continue
		}
		for quota[ms[next]] == 0 {
			next++
		}
		out[p] = ms[next]
		quota[ms[next]]--
	}
	return out
}

// Of returns the partitions target gives member m, ascending.
func Of(target map[int]string, m string) []int {
	var out []int
	for p, o := range target {
		if o == m {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}
