package testenv

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// TestPortReservedAndOutsideEphemeralRange: every port Port hands out is
// below the kernel's ephemeral range, distinct, bindable, and locked
// against another taker (the lock a second test process would try).
func TestPortReservedAndOutsideEphemeralRange(t *testing.T) {
	high := ephemeralLow()
	seen := map[int]bool{}
	for i := 0; i < 20; i++ {
		p := FreePort(t)
		if p < portLow || p >= high {
			t.Fatalf("port %d outside [%d, %d)", p, portLow, high)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
		f, ok, err := lockPort(filepath.Join(os.TempDir(), "receiptflow-test-ports", strconv.Itoa(p)))
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			f.Close()
			t.Fatalf("port %d: a second taker got its lock", p)
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("port %d not bindable: %v", p, err)
		}
		l.Close()
	}
}

// TestPortSkipsBusyPorts: a port some other socket listens on is never
// handed out, even when its lock file is free.
func TestPortSkipsBusyPorts(t *testing.T) {
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	busy := map[int]bool{}
	for p := portLow; p < portLow+50; p++ {
		if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p)); err == nil {
			held = append(held, l)
			busy[p] = true
		}
	}
	if len(held) == 0 {
		t.Fatalf("no port of [%d, %d) could be held for the test", portLow, portLow+50)
	}
	for i := 0; i < 5; i++ {
		p, f, err := reserve(0) // probe from portLow, through the held ones
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if busy[p] {
			t.Fatalf("port %d handed out while a listener holds it", p)
		}
	}
}
