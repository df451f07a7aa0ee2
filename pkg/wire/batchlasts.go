package wire

import (
	"fmt"
	"strconv"
	"strings"
)

// FormatBatchLasts is HdrBatchLasts' value for a batch whose messages have
// subjects subjects (in batch order): "<position> <subject>" for each
// distinct subject, its last position (1-based), separated by spaces, in
// order of position. Subjects hold no spaces.
func FormatBatchLasts(subjects []string) string {
	last := make(map[string]int, 8)
	for i, s := range subjects {
		last[s] = i + 1
	}
	var b strings.Builder
	for i, s := range subjects {
		if last[s] != i+1 {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.Itoa(i + 1))
		b.WriteByte(' ')
		b.WriteString(s)
	}
	return b.String()
}

// ParseBatchLasts reads a HdrBatchLasts value of a batch of n messages:
// each subject's last position. Positions must rise and lie in 1..n, and
// no subject may repeat.
func ParseBatchLasts(v string, n int) (map[string]int, error) {
	f := strings.Fields(v)
	if len(f)%2 != 0 {
		return nil, fmt.Errorf("wire: %s %q: odd number of fields", HdrBatchLasts, v)
	}
	out := make(map[string]int, len(f)/2)
	prev := 0
	for i := 0; i < len(f); i += 2 {
		pos, err := strconv.Atoi(f[i])
		if err != nil || pos <= prev || pos > n {
			return nil, fmt.Errorf("wire: %s %q: position %q out of order or outside 1..%d", HdrBatchLasts, v, f[i], n)
		}
		if _, dup := out[f[i+1]]; dup {
			return nil, fmt.Errorf("wire: %s %q: subject %s twice", HdrBatchLasts, v, f[i+1])
		}
		out[f[i+1]] = pos
		prev = pos
	}
	return out, nil
}
