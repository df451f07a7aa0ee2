package window

import (
	"testing"
	"time"
)

func ms(s string) int64 {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t.UnixMilli()
}

func TestOf(t *testing.T) {
	for _, tc := range []struct {
		at, id, start, end string
	}{
		{"2026-12-02T10:00:00Z", "2026-12-02T10", "2026-12-02T10:00:00Z", "2026-12-02T11:00:00Z"},
		{"2026-12-02T10:59:59.999Z", "2026-12-02T10", "2026-12-02T10:00:00Z", "2026-12-02T11:00:00Z"},
		{"2026-12-02T11:00:00Z", "2026-12-02T11", "2026-12-02T11:00:00Z", "2026-12-02T12:00:00Z"},
		{"2026-12-31T23:30:00Z", "2026-12-31T23", "2026-12-31T23:00:00Z", "2027-01-01T00:00:00Z"},
		{"2000-01-01T00:00:00Z", "2000-01-01T00", "2000-01-01T00:00:00Z", "2000-01-01T01:00:00Z"},
	} {
		b := Of(ms(tc.at))
		if b.ID != tc.id || b.Start != ms(tc.start) || b.End != ms(tc.end) {
			t.Errorf("Of(%s) = %+v, want %s [%s, %s)", tc.at, b, tc.id, tc.start, tc.end)
		}
		if got := ID(ms(tc.at)); got != tc.id {
			t.Errorf("ID(%s) = %s", tc.at, got)
		}
		start, err := ParseID(tc.id)
		if err != nil || start != ms(tc.start) {
			t.Errorf("ParseID(%s) = %d, %v", tc.id, start, err)
		}
	}
	if _, err := ParseID("2026-12-02 10"); err == nil {
		t.Error("ParseID accepted a bad id")
	}
}

func TestClassify(t *testing.T) {
	end := ms("2026-12-02T11:00:00Z")
	grace := int64(time.Hour / time.Millisecond)
	for _, tc := range []struct {
		wp   string
		want Class
	}{
		{"2026-12-02T10:59:59.999Z", OnTime},
		{"2026-12-02T11:00:00Z", Correction},
		{"2026-12-02T11:59:59.999Z", Correction},
		{"2026-12-02T12:00:00Z", TooLate},
		{"2026-12-03T00:00:00Z", TooLate},
	} {
		if got := Classify(ms(tc.wp), end, grace); got != tc.want {
			t.Errorf("Classify(W_p=%s) = %v, want %v", tc.wp, got, tc.want)
		}
	}
	if got := Classify(NoWatermark, end, grace); got != OnTime {
		t.Errorf("no watermark: %v", got)
	}
	if got := Classify(EndOfStream, end, grace); got != TooLate {
		t.Errorf("end of stream: %v", got)
	}
}

func TestStatusOf(t *testing.T) {
	end := ms("2026-12-02T11:00:00Z")
	grace := int64(time.Hour / time.Millisecond)
	for _, tc := range []struct {
		w    string
		want Status
		ord  int64
	}{
		{"2026-12-02T10:30:00Z", StatusOpen, 0},
		{"2026-12-02T11:00:00Z", StatusInGrace, 1},
		{"2026-12-02T11:59:00Z", StatusInGrace, 1},
		{"2026-12-02T12:00:00Z", StatusFinal, 2},
	} {
		got := StatusOf(ms(tc.w), end, grace)
		if got != tc.want || got.Ordinal() != tc.ord {
			t.Errorf("StatusOf(W=%s) = %v (%d), want %v (%d)", tc.w, got, got.Ordinal(), tc.want, tc.ord)
		}
	}
}

func TestAdvanceNeverGoesBack(t *testing.T) {
	lateness := int64(5 * 60_000)
	wp := NoWatermark
	for _, tc := range []struct {
		ev, want string
	}{
		{"2026-12-02T10:10:00Z", "2026-12-02T10:05:00Z"},
		{"2026-12-02T10:02:00Z", "2026-12-02T10:05:00Z"}, // older event: no change
		{"2026-12-02T10:30:00Z", "2026-12-02T10:25:00Z"},
	} {
		wp = Advance(wp, ms(tc.ev), lateness)
		if wp != ms(tc.want) {
			t.Fatalf("after %s: W_p = %s, want %s", tc.ev, Time(wp), tc.want)
		}
	}
}

func TestPartitionIsFNV1a32ModP(t *testing.T) {
	// fnv1a32("") = 0x811c9dc5; fnv1a32("a") = 0xe40c292c.
	for _, tc := range []struct {
		key  string
		n    int
		want int
	}{
		{"", 8, 0x811c9dc5 % 8},
		{"a", 8, 0xe40c292c % 8},
		{"a", 7, 0xe40c292c % 7},
	} {
		if got := Partition(tc.key, tc.n); got != tc.want {
			t.Errorf("Partition(%q, %d) = %d, want %d", tc.key, tc.n, got, tc.want)
		}
	}
	// Spread: 1000 keys over 8 partitions, none empty.
	seen := map[int]int{}
	for i := 0; i < 1000; i++ {
		seen[Partition("store-"+string(rune('a'+i%26))+time.Duration(i).String(), 8)]++
	}
	if len(seen) != 8 {
		t.Fatalf("1000 keys hit only %d partitions", len(seen))
	}
}

func TestRouteSpreadsOnlyDeclaredHotKeys(t *testing.T) {
	hot, err := ParseHotKeys("store-0=4", 8)
	if err != nil {
		t.Fatal(err)
	}
	home := Partition("store-0", 8)
	got := map[int]int{}
	for i := 0; i < 4000; i++ {
		id := "evt-" + time.Duration(i).String()
		p := Route("store-0", id, 8, hot)
		if p != Route("store-0", id, 8, hot) {
			t.Fatal("Route is not a function of the event")
		}
		got[p]++
		// Other keys keep their partition whatever the event.
		if q := Route("store-1", id, 8, hot); q != Partition("store-1", 8) {
			t.Fatalf("store-1 routed to %d, want %d", q, Partition("store-1", 8))
		}
	}
	if len(got) != 4 {
		t.Fatalf("store-0 spread over %d partitions, want 4: %v", len(got), got)
	}
	for k := 0; k < 4; k++ {
		if n := got[(home+k)%8]; n < 800 || n > 1200 {
			t.Fatalf("partition %d got %d of 4000: %v", (home+k)%8, n, got)
		}
	}
	if Route("store-0", "x", 8, nil) != home {
		t.Fatal("without hot keys Route must be Partition")
	}
}

func TestParseHotKeys(t *testing.T) {
	h, err := ParseHotKeys(" b=2, a=8 ", 8)
	if err != nil || h.String() != "a=8,b=2" {
		t.Fatalf("%v %v", h, err)
	}
	if h, err := ParseHotKeys("", 8); err != nil || h != nil {
		t.Fatalf("empty: %v %v", h, err)
	}
	for _, bad := range []string{"a", "a=1", "a=9", "=2", "a=x", "a=2,a=3"} {
		if _, err := ParseHotKeys(bad, 8); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
