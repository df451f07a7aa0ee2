package reconcile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
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

// splitLines is every line the splitter cuts from r (with its number,
// kept bytes, full size and whether it was cut) and the error it ends
// with, reading blocks of block bytes.
func splitLines(r io.Reader, max, block int) ([]string, error) {
	s := newSplitter(r, max, block)
	var got []string
	for {
		ch := &chunk{}
		if !s.fill(ch) {
			return got, nil
		}
		for _, l := range ch.lines {
			got = append(got, fmt.Sprintf("%d:%q/%d/%v", l.n, ch.data[l.start:l.end], l.size, l.cut))
		}
		if ch.err != nil {
			return got, ch.err
		}
	}
}

// readLines is splitLines done by lineReader, the pass's way before
// blocks: blank lines skipped, as the pass skips them.
func readLines(r io.Reader, max int) ([]string, error) {
	lr := newLineReader(r, max)
	var got []string
	for n := 1; ; n++ {
		line, size, cut, err := lr.next()
		if err == io.EOF {
			return got, nil
		}
		if err != nil {
			return got, fmt.Errorf("reconcile: read line %d: %w", n, err)
		}
		if !cut && len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		got = append(got, fmt.Sprintf("%d:%q/%d/%v", n, line, size, cut))
	}
}

// TestSplitterIsLineReader: the block splitter cuts exactly the lines the
// line reader did, with the same numbers, kept bytes, sizes and read
// errors, over random inputs of short, blank, long and overlong lines, CR
// LF and lone CRs, byte-order marks, with and without a last newline, for
// blocks smaller and larger than the lines and readers that hand out a few
// bytes at a time or fail midway.
func TestSplitterIsLineReader(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	pieces := []string{"", " ", "\t", "\u00a0", "\r", "\r\r", "{\"a\":1}", "x", "é", "\xEF\xBB\xBF"}
	boom := errors.New("disk on fire")
	for i := range 3000 {
		var in strings.Builder
		if rng.IntN(4) == 0 {
			in.WriteString("\xEF\xBB\xBF")
		}
		for range rng.IntN(12) {
			switch rng.IntN(6) {
			case 0:
				in.WriteString(strings.Repeat("y", rng.IntN(300)))
			default:
				for range rng.IntN(4) {
					in.WriteString(pieces[rng.IntN(len(pieces))])
				}
			}
			if rng.IntN(5) > 0 {
				in.WriteString([]string{"\n", "\r\n", "\n\n"}[rng.IntN(3)])
			}
		}
		data := in.String()
		max := 1 + rng.IntN(120)
		block := 1 + rng.IntN(64)
		var fail error
		if rng.IntN(4) == 0 {
			fail = boom
		}
		want, wantErr := readLines(&dribble{data: []byte(data), err: fail}, max)
		got, gotErr := splitLines(&dribble{data: []byte(data), err: fail}, max, block)
		if !slices.Equal(got, want) || fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
			t.Fatalf("case %d, max %d, block %d, input %q:\nsplitter    %v %v\nline reader %v %v", i, max, block, data, got, gotErr, want, wantErr)
		}
		// Read whole too: the last line and the error come with the data.
		got, gotErr = splitLines(iotest.DataErrReader(strings.NewReader(data)), max, block)
		want, wantErr = readLines(strings.NewReader(data), max)
		if !slices.Equal(got, want) || fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
			t.Fatalf("case %d whole, max %d, block %d, input %q:\nsplitter    %v %v\nline reader %v %v", i, max, block, data, got, gotErr, want, wantErr)
		}
	}
}

// TestSplitterNoProgress: a reader that returns nothing, forever, ends the
// input with io.ErrNoProgress instead of spinning.
func TestSplitterNoProgress(t *testing.T) {
	_, err := splitLines(emptyReader{}, 100, 16)
	if !errors.Is(err, io.ErrNoProgress) {
		t.Fatalf("got %v", err)
	}
}

type emptyReader struct{}

func (emptyReader) Read([]byte) (int, error) { return 0, nil }
