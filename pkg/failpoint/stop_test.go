package failpoint

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/testenv"
)

// stopChildEnv makes the test binary the child of TestStopHoldsTheCaller.
const stopChildEnv = "RECEIPTFLOW_FAILPOINT_STOP_CHILD"

// stopRounds is how often the child passes its stop failpoint.
const stopRounds = 300

func TestMain(m *testing.M) {
	if os.Getenv(stopChildEnv) != "" {
		stopChild()
		return
	}
	os.Exit(m.Run())
}

// stopChild passes a stop@every:1 failpoint stopRounds times and writes
// the round's number after each pass: what a service does right after
// the failpoint (its write) must not happen before the process stopped.
// Other goroutines keep the threads busy, as a service's do.
func stopChild() {
	s, err := Parse(WindowerBeforeWrite+"=stop@every:1", Process)
	if err != nil {
		os.Exit(2)
	}
	for range 2 {
		go func() {
			for x := 0; ; x++ {
				if x%1_000_000 == 0 {
					time.Sleep(time.Microsecond)
				}
			}
		}()
	}
	for i := range stopRounds {
		_ = s.Hit(WindowerBeforeWrite)
		fmt.Printf("%d\n", i)
	}
	os.Exit(0)
}

// TestStopHoldsTheCaller: the goroutine that passes a stop failpoint is
// held from that moment: nothing it does after Hit happens before the
// process is stopped (a SIGSTOP sent to the process is taken by any of
// its threads, and the caller's ran on until the stop reached it: in CI a
// windower applied its first batch after printing that it stopped).
func TestStopHoldsTheCaller(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run", "^$")
	cmd.Env = append(os.Environ(), stopChildEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = nil
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	lines := make(chan int, stopRounds)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			n, _ := strconv.Atoi(sc.Text())
			lines <- n
		}
		close(lines)
	}()
	written := 0 // rounds the child has said it finished
	for round := range stopRounds {
		// Wait until the child is stopped in this round's Hit.
		deadline := time.Now().Add(10 * time.Second)
		for {
			st, err := testenv.ProcState(cmd.Process.Pid)
			if err != nil {
				t.Fatal(err)
			}
			if st == 'T' {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the child never stopped (state %c)", round, st)
			}
			time.Sleep(200 * time.Microsecond)
		}
		// Stopped: what it wrote after the last Hit must be in the pipe.
		// Give the pipe a moment, then count what arrived.
		time.Sleep(2 * time.Millisecond)
	drain:
		for {
			select {
			case n := <-lines:
				if n != written {
					t.Fatalf("round %d: the child wrote %d, want %d", round, n, written)
				}
				written++
			default:
				break drain
			}
		}
		if written != round {
			t.Fatalf("round %d: the child wrote %d rounds while stopped in round %d: it went on past its stop failpoint before the stop reached it", round, written, round)
		}
		if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
}
