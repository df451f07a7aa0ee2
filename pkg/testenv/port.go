package testenv

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Ports handed out by Port lie below the kernel's ephemeral range, so that
// no outgoing connection on the machine is ever given one as its local
// port between the moment a test learns the port and the moment it binds
// it (the cause of "bind: address already in use" when a test stops a
// server and starts another on the same port, or starts one late), and a
// client dialing a port where nothing listens yet cannot connect to itself
// (which Linux allows when the source and destination port are equal).
const (
	portLow         = 20000
	defaultEphemLow = 32768
)

var (
	portMu    sync.Mutex
	portLocks []*os.File // Port's reservations, held until the process ends
)

// Port returns a 127.0.0.1 TCP port that nothing listens on now, reserved
// for this process against every other test process of this project (a
// lock file per port under the temporary directory) until the process
// ends, and outside the ephemeral range (see above). Use it where a port
// must be known before its server starts, or must be reused after its
// server stops; a server that can start on port 0 should.
func Port() (int, error) {
	p, f, err := reserve(-1)
	if err != nil {
		return 0, err
	}
	if f != nil {
		portMu.Lock()
		portLocks = append(portLocks, f)
		portMu.Unlock()
	}
	return p, nil
}

// FreePort is Port for a test: the reservation ends with t (after the
// cleanups registered later, such as stopping a server on the port), and
// it fails t if there is no port.
func FreePort(t testing.TB) int {
	t.Helper()
	p, f, err := reserve(-1)
	if err != nil {
		t.Fatal(err)
	}
	if f != nil {
		t.Cleanup(func() { f.Close() })
	}
	return p
}

// reserve finds and locks a port, probing upwards from portLow+start
// (start < 0: a random place), wrapping around. f is the lock (nil in the
// fallback).
func reserve(start int) (int, *os.File, error) {
	high := ephemeralLow()
	if high <= portLow+100 {
		p, err := anyPort()
		return p, nil, err
	}
	dir := filepath.Join(os.TempDir(), "receiptflow-test-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return 0, nil, fmt.Errorf("testenv: port: %w", err)
	}
	span := high - portLow
	if start < 0 {
		start = rand.IntN(span)
	}
	for i := 0; i < span; i++ {
		p := portLow + (start+i)%span
		f, ok, err := lockPort(filepath.Join(dir, strconv.Itoa(p)))
		if err != nil {
			return 0, nil, fmt.Errorf("testenv: port: %w", err)
		}
		if !ok {
			continue // another test process holds it
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			f.Close() // something else on the machine uses it
			continue
		}
		l.Close()
		return p, f, nil
	}
	return 0, nil, errors.New("testenv: port: no free port below the ephemeral range")
}

// ephemeralLow is the first port of the kernel's ephemeral range.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return defaultEphemLow
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return defaultEphemLow
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return defaultEphemLow
	}
	return n
}

// anyPort is the fallback where the range leaves no room: a port the
// kernel picks, free a moment ago.
func anyPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("testenv: port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
