package boundedrun

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

func held(in string, backlog func(context.Context) (uint64, error), max uint64, stall time.Duration) *heldReader {
	return &heldReader{ctx: context.Background(), br: bufio.NewReader(strings.NewReader(in)), backlog: backlog, max: max, stall: stall}
}

func lines(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "{\"n\":%d}\n", i)
	}
	return b.String()
}

// TestHeldReaderPassesTheFileUnchanged: every byte, a last line without a
// newline included, through small and large reads; the backlog is asked
// before the first line and every holdEvery lines after.
func TestHeldReaderPassesTheFileUnchanged(t *testing.T) {
	in := lines(3*holdEvery+4) + "{\"n\":\"last\"}"
	for _, size := range []int{3, 1 << 16} {
		var asked int
		h := held(in, func(context.Context) (uint64, error) { asked++; return 0, nil }, 10, time.Second)
		got, err := io.ReadAll(bufio.NewReaderSize(onlyReader{h}, size))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != in {
			t.Fatalf("read %d bytes, want the %d of the file", len(got), len(in))
		}
		if want := 4; asked != want {
			t.Fatalf("backlog asked %d times for %d lines, want %d", asked, 3*holdEvery+5, want)
		}
	}
}

// onlyReader hides everything but Read (io.ReadAll would otherwise use
// nothing else either; bufio is there to vary the read sizes).
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(b []byte) (int, error) { return o.r.Read(b) }

// TestHeldReaderWaitsForTheBacklog: no line passes while the backlog is
// over the bound, and the source goes on once it is not.
func TestHeldReaderWaitsForTheBacklog(t *testing.T) {
	backlog := []uint64{500, 400, 300, 100, 0}
	var asked int
	h := held(lines(2), func(context.Context) (uint64, error) {
		n := backlog[min(asked, len(backlog)-1)]
		asked++
		return n, nil
	}, 100, time.Minute)
	br := bufio.NewReader(h)
	first, err := br.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if first != "{\"n\":0}\n" || asked != 4 {
		t.Fatalf("first line %q after %d looks at the backlog, want it after the 4th (backlog 100, the bound)", first, asked)
	}
}

// TestHeldReaderStopsOnAStall: a backlog that does not shrink for the
// stall timeout is an error naming it, and so is the end of ctx.
func TestHeldReaderStopsOnAStall(t *testing.T) {
	h := held(lines(2), func(context.Context) (uint64, error) { return 300, nil }, 100, 50*time.Millisecond)
	_, err := io.ReadAll(h)
	if err == nil || !strings.Contains(err.Error(), "backlog stays at 300, over 100") {
		t.Fatalf("err = %v, want the stall", err)
	}
	if _, again := h.Read(make([]byte, 8)); again != err {
		t.Fatalf("a read after the stall: %v, want the same error", again)
	}

	ctx, cancel := context.WithCancel(context.Background())
	h = held(lines(2), func(context.Context) (uint64, error) { cancel(); return 300, nil }, 100, -1)
	h.ctx = ctx
	if _, err := io.ReadAll(h); err != context.Canceled {
		t.Fatalf("err = %v after ctx ended, want context.Canceled", err)
	}
}
