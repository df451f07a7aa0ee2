package daemon

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/testenv"
)

// TestProfileDir: with --profile-dir a service process writes a CPU
// profile and, when it stops on SIGTERM, an allocation profile, named
// after the service and its instance, and go tool pprof reads both.
func TestProfileDir(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go tool pprof reads the profiles: %v", err)
	}
	_, natsURL := testenv.NATS(t)
	r := testenv.RedisServer(t)
	dir := filepath.Join(t.TempDir(), "profiles")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var log syncBuf
	s := stub{started: make(chan struct{})}
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, "windower", []string{"--nats-url", natsURL, "--redis-url", r.URL(), "--partitions", "2",
			"--instance", "1", "--instances", "2", "--http-addr", "127.0.0.1:0", "--profile-dir", dir}, &log,
			func(*Deps) (Runner, error) { return s, nil })
	}()
	select {
	case <-s.started:
	case <-time.After(15 * time.Second):
		t.Fatalf("the service did not start:\n%s", log.String())
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d:\n%s", code, log.String())
	}
	for file, typ := range map[string]string{"windower-1.cpu.pprof": "Type: cpu", "windower-1.allocs.pprof": "Type: alloc_space"} {
		path := filepath.Join(dir, file)
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("%s: %v\n%s", file, err, log.String())
		}
		out, err := exec.Command(goBin, "tool", "pprof", "-top", path).CombinedOutput()
		if err != nil {
			t.Fatalf("go tool pprof -top %s: %v\n%s", file, err, out)
		}
		if !strings.Contains(string(out), typ) {
			t.Errorf("go tool pprof -top %s does not say %q:\n%s", file, typ, out)
		}
	}
}
