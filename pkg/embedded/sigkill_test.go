package embedded_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/embedded"
	"github.com/receiptflow/receiptflow/pkg/testenv"
)

// childEnv, when set, makes TestHelperNATSProcess run a server in this
// (child) process: "<store dir>|<port>|<sync always: true/false>".
const childEnv = "RECEIPTFLOW_EMBEDDED_NATS_CHILD"

// TestHelperNATSProcess is not a test: it is the body of the child process
// that TestAckedPublishSurvivesSIGKILL kills. It starts StartNATS, says
// "ready" on stdout and waits to be killed.
func TestHelperNATSProcess(t *testing.T) {
	spec := os.Getenv(childEnv)
	if spec == "" {
		return // an ordinary run: nothing to do
	}
	parts := strings.Split(spec, "|")
	port, _ := strconv.Atoi(parts[1])
	always, _ := strconv.ParseBool(parts[2])
	if _, err := embedded.StartNATS(embedded.NATSConfig{StoreDir: parts[0], Port: port, SyncAlways: always}); err != nil {
		fmt.Println("error", err)
		os.Exit(3)
	}
	fmt.Println("ready")
	select {}
}

// natsChild is a nats-server (StartNATS) in a child process.
type natsChild struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func startChild(t *testing.T, dir string, port int, always bool) *natsChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperNATSProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s|%d|%t", childEnv, dir, port, always))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &natsChild{cmd: cmd, done: make(chan struct{})}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case ready <- sc.Text():
			default:
			}
		}
	}()
	go func() { cmd.Wait(); close(c.done) }()
	t.Cleanup(c.kill)
	select {
	case line := <-ready:
		if line != "ready" {
			t.Fatalf("child nats-server: %s", line)
		}
	case <-c.done:
		t.Fatal("child nats-server exited during start-up")
	case <-time.After(30 * time.Second):
		t.Fatal("child nats-server not ready after 30s")
	}
	return c
}

// kill sends SIGKILL and waits for the process to be gone.
func (c *natsChild) kill() {
	c.cmd.Process.Kill()
	<-c.done
}

// TestAckedPublishSurvivesSIGKILL: every publish the server acknowledged
// to a one-replica file stream is there after nats-server is SIGKILLed
// (a process crash: the kernel keeps what the process wrote) and started
// again on the same store, with the default sync_interval and with
// sync_interval: always. What each setting guarantees, and why, is in
// docs/recovery.md ("Durability of the broker's file store"); a power
// loss (which only `always` survives) cannot be produced in a test.
func TestAckedPublishSurvivesSIGKILL(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		t.Skip("in the child process")
	}
	for _, always := range []bool{false, true} {
		t.Run("sync_always="+strconv.FormatBool(always), func(t *testing.T) {
			dir := t.TempDir()
			port := testenv.FreePort(t)
			url := "nats://127.0.0.1:" + strconv.Itoa(port)
			child := startChild(t, dir, port, always)

			nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "K", Subjects: []string{"k.>"}, Storage: jetstream.FileStorage}); err != nil {
				t.Fatal(err)
			}
			const n = 2000
			futs := make([]jetstream.PubAckFuture, 0, n)
			for i := range n {
				f, err := js.PublishAsync("k."+strconv.Itoa(i%8), []byte("message "+strconv.Itoa(i)))
				if err != nil {
					t.Fatal(err)
				}
				futs = append(futs, f)
			}
			var last uint64
			for _, f := range futs {
				select {
				case ack := <-f.Ok():
					last = max(last, ack.Sequence)
				case err := <-f.Err():
					t.Fatalf("publish: %v", err)
				case <-ctx.Done():
					t.Fatal("acks not in within 2 minutes")
				}
			}
			child.kill() // at once after the last ack
			startChild(t, dir, port, always)

			var st *jetstream.StreamInfo
			testenv.CheckFor(t, time.Minute, 50*time.Millisecond, func() error {
				s, err := js.Stream(ctx, "K")
				if err != nil {
					return fmt.Errorf("stream after the restart: %w", err)
				}
				st, err = s.Info(ctx)
				return err
			})
			if st.State.Msgs != n || st.State.LastSeq != last {
				t.Fatalf("after SIGKILL: %d messages, last seq %d; %d were acknowledged, the last as seq %d", st.State.Msgs, st.State.LastSeq, n, last)
			}
		})
	}
}
