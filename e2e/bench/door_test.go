package bench

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/receiptflow/receiptflow/pkg/frontdoor"
	"github.com/receiptflow/receiptflow/pkg/testenv"
)

// TestRoutingResponderIsAProcess: the routing floor's plain responder
// runs as a process of its own (its CPU is measured apart from the
// producers'), answers a request in the door's form and ends when told.
func TestRoutingResponderIsAProcess(t *testing.T) {
	_, url := testenv.NATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rp, err := startResponder(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if rp.pid() == 0 || rp.pid() == os.Getpid() {
		t.Fatalf("responder pid %d: want a process of its own", rp.pid())
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for range 50 {
		m := nats.NewMsg(routeSubject)
		m.Data = []byte(`{"event_id":"e1"}`)
		reply, err := nc.RequestMsgWithContext(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		if got := reply.Header.Get(frontdoor.HdrStatus); got != "200" {
			t.Fatalf("answer status %q, want 200", got)
		}
	}
	if _, err := cpuTime(rp.pid()); err != nil {
		t.Fatalf("responder CPU: %v: want it readable from /proc", err)
	}
	rp.stop()
	if !rp.cmd.ProcessState.Exited() || rp.cmd.ProcessState.ExitCode() != 0 {
		t.Fatalf("responder ended %v, want exit 0 once its input closed", rp.cmd.ProcessState)
	}
}

// TestDoorFloorRow: the NATS floor adds routing, the responder and
// nats-server's storing in the HTTP single-record run, as a ratio to
// receiptctl ingest; without that run it is skipped.
func TestDoorFloorRow(t *testing.T) {
	line := func(r *Results) string {
		var out bytes.Buffer
		r.print(&out)
		for _, l := range strings.Split(out.String(), "\n") {
			if strings.HasPrefix(l, "Door NATS floor") {
				return l
			}
		}
		t.Fatalf("no Door NATS floor row in:\n%s", out.String())
		return ""
	}
	ms := []float64{1, 2, 3}
	dr := &doorResult{
		CLI: doorRun{Name: "receiptctl-ingest", Records: 1000, EPS: 1000, CPU: map[string]time.Duration{"receiptctl": 5 * time.Millisecond, "nats-server": 5 * time.Millisecond}},
		Runs: []doorRun{{Name: "http-1", Door: "http", PerRequest: 1, Producers: 16, Records: 100, EPS: 100, Ms: ms,
			CPU: map[string]time.Duration{"ingest": 5 * time.Millisecond, "nats-server": 3 * time.Millisecond}}},
		Routing: &doorRun{Name: "nats-route-only", Records: 100, EPS: 100, Ms: ms,
			CPU: map[string]time.Duration{"nats-server": 2 * time.Millisecond, "responder": time.Millisecond}},
	}
	// 10 µs per event for receiptctl; 20 + 10 routing and responder, 30
	// storing: 60 µs = 6.00×.
	got := line(&Results{Door: dr})
	for _, want := range []string{"60.0 µs", "(30.0 µs)", "(30.0 µs, the HTTP 1-per-request run)", "6.00×"} {
		if !strings.Contains(got, want) {
			t.Errorf("floor row %q lacks %q", got, want)
		}
	}
	dr.Runs[0].Name = "nats-1"
	if got := line(&Results{Door: dr}); !strings.Contains(got, "skipped") {
		t.Errorf("floor row without the HTTP single-record run: %q, want skipped", got)
	}
}

// TestSwitchesOfCountsWakeUps: the idle row's context switches grow when
// a process sleeps and wakes, and a process that is gone is left out.
func TestSwitchesOfCountsWakeUps(t *testing.T) {
	pids := map[string]int{"self": os.Getpid(), "gone": 1 << 30}
	before := switchesOf(pids)
	for range 20 {
		time.Sleep(time.Millisecond)
	}
	after := switchesOf(pids)
	if _, ok := after["gone"]; ok {
		t.Fatal("a process that does not exist has a count")
	}
	if after["self"] < before["self"]+20 {
		t.Fatalf("20 sleeps moved the count from %d to %d, want at least 20 more", before["self"], after["self"])
	}
}
