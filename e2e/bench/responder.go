package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/receiptflow/receiptflow/pkg/frontdoor"
)

// The routing floor's responder runs as a process of its own, a copy of
// the bench binary with responderEnv set to the server's URL, so that its
// CPU is measured apart from the producers': what the plainest nats.go
// service pays per single-record request, on one thread as the ingest
// service runs by default (--procs 1).

// responderEnv, set to a NATS URL, makes the binary a plain responder.
const responderEnv = "RECEIPTBENCH_RESPONDER"

// routeSubject is the subject the plain responder answers on.
const routeSubject = "rf.bench.route"

func init() {
	if url := os.Getenv(responderEnv); url != "" {
		os.Exit(respond(url))
	}
}

// respond answers every request on routeSubject with the status header
// and a fixed answer until its standard input closes; it writes "ready"
// once subscribed.
func respond(url string) int {
	runtime.GOMAXPROCS(1)
	nc, err := nats.Connect(url)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench responder: %v\n", err)
		return 2
	}
	defer nc.Close()
	answer := []byte(`{"results":[],"stored":1,"duplicates":0,"invalid":0}`)
	_, err = nc.QueueSubscribe(routeSubject, "route", func(m *nats.Msg) {
		r := nats.NewMsg(m.Reply)
		r.Header.Set(frontdoor.HdrStatus, "200")
		r.Data = answer
		_ = m.RespondMsg(r)
	})
	if err == nil {
		err = nc.Flush()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench responder: %v\n", err)
		return 2
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// responderProcess is a running plain responder.
type responderProcess struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

// startResponder starts a plain responder on url and waits until it is
// subscribed.
func startResponder(ctx context.Context, url string) (*responderProcess, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, self)
	cmd.Env = append(withoutEnv(os.Environ(), measureEnv), responderEnv+"="+url)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	r := &responderProcess{cmd: cmd, stdin: stdin}
	line, err := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		r.stop()
		return nil, fmt.Errorf("bench: the plain responder did not start (%q, %v)", line, err)
	}
	return r, nil
}

func (r *responderProcess) pid() int { return r.cmd.Process.Pid }

// stop closes the responder's input and waits for it to end.
func (r *responderProcess) stop() {
	_ = r.stdin.Close()
	_ = r.cmd.Wait()
}
