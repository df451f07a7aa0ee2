package reconcile

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
)

// TestLineReader splits inputs around the bufio buffer size and the keep
// limit, with and without CR and a final newline.
func TestLineReader(t *testing.T) {
	const keep = 100 << 10 // larger than the 64 KiB bufio buffer
	long := strings.Repeat("y", 200<<10)
	tests := []struct {
		in   string
		want []string // "len/size/cut"
	}{
		{"", nil},
		{"\n", []string{"0/0/false"}},
		{"a\nbb\r\n\nccc", []string{"1/1/false", "2/2/false", "0/0/false", "3/3/false"}},
		{strings.Repeat("x", 64<<10) + "\n", []string{fmt.Sprintf("%d/%d/false", 64<<10, 64<<10)}},
		{strings.Repeat("x", keep) + "\r\n", []string{fmt.Sprintf("%d/%d/false", keep, keep)}},
		{strings.Repeat("x", keep+1) + "\n", []string{fmt.Sprintf("%d/%d/true", keep, keep+1)}},
		{long + "\nz", []string{fmt.Sprintf("%d/%d/true", keep, len(long)), "1/1/false"}},
		{long, []string{fmt.Sprintf("%d/%d/true", keep, len(long))}},
		{"a\rb\n", []string{"3/3/false"}},
		// CR LF split by the 64 KiB buffer; a CR at the buffer's end that
		// belongs to the line.
		{strings.Repeat("x", 64<<10-1) + "\r\nq", []string{fmt.Sprintf("%d/%d/false", 64<<10-1, 64<<10-1), "1/1/false"}},
		{strings.Repeat("x", 64<<10-1) + "\rzz\n", []string{fmt.Sprintf("%d/%d/false", 64<<10+2, 64<<10+2)}},
		{"tail\r", []string{"4/4/false"}},
		// A byte-order mark is skipped at the start of the input only.
		{"\xEF\xBB\xBFab\n\xEF\xBB\xBFc", []string{"2/2/false", "4/4/false"}},
		{"\xEF\xBB\xBF", nil},
		{"\xEF\xBBx\n", []string{"3/3/false"}},
	}
	for i, tc := range tests {
		lr := newLineReader(strings.NewReader(tc.in), keep)
		var got []string
		for {
			line, size, cut, err := lr.next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, fmt.Sprintf("%d/%d/%v", len(line), size, cut))
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("case %d: got %v, want %v", i, got, tc.want)
		}
	}
}
