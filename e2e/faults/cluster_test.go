package faults

// Cluster faults (issue 16): the 3-node R3 shape of docs/deployment.md,
// one node at a time SIGKILLed (restarted on its store after 0.5–1 s) or
// stalled (SIGSTOP for 6 s, then SIGCONT), while receiptctl ingest
// publishes and while the services deliver a backlog. The leaders of RAW
// and VALID are hit at least twice each. Every final window must equal the
// clean run's and parity must hold. The seed of each schedule is logged.
//
// These tests run in parallel with each other (two at a time on two
// cores: go test's -parallel is GOMAXPROCS), after every serial test of
// the package: a cluster test waits most of its time (stalls, elections,
// restarts on the store) and uses about half a core, and none depends on
// another's speed. Each cluster has its own ports, stores and redis-server.
// TestClusterPartitions stays serial: its nftables rules act on loopback
// addresses.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// clusterChunks is how many receiptctl ingest runs publish the input in
// the ingest-time tests: a fault is placed inside every other one, so
// ingest is still publishing for each of them however fast it is.
const clusterChunks = 20

// clusterIngestFaults runs k faults while the fixture is ingested in
// chunks, then starts the services and checks the outcome.
func clusterIngestFaults(t *testing.T, k int, kind string, fault func(c *clusterDeployment, ctx context.Context, r *rand.Rand, admin *connect.Conn, target string)) {
	t.Parallel()
	r := chaosRand(t)
	brokerSet.cleanRun(t)
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	c := deployCluster(t, ctx)
	admin := c.clusterAdmin(ctx)
	c.startServices()
	plan := targets(r, k)
	at := map[int]bool{}
	for i := range k {
		at[1+2*i] = true
	}
	i := 0
	faults := c.chunkedIngest(ctx, admin, brokerSet.fixture(t), clusterChunks, at, func() {
		fault(c, ctx, r, admin, plan[i])
		i++
	})
	c.verdict(ctx, admin, kind+" during ingest", faults, k, "while ingest ran")
}

// clusterDeliveryFaults runs k faults while the services deliver and no
// publish is in flight: the fixture is ingested in 2k chunks, one
// receiptctl ingest each. For every other chunk the validator is held
// (SIGSTOP) while the chunk is ingested, so that when ingest has exited
// the whole chunk is still to be delivered; the validator is continued
// and the fault hits at once. The next chunk is ingested once the cluster
// has recovered. (A backlog ingested first drains before nine faults and
// their recoveries are over; without the hold, a small chunk can be
// delivered before its fault.)
func clusterDeliveryFaults(t *testing.T, k int, kind string, fault func(c *clusterDeployment, ctx context.Context, r *rand.Rand, admin *connect.Conn, target string)) {
	t.Parallel()
	r := chaosRand(t)
	brokerSet.cleanRun(t)
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	c := deployCluster(t, ctx)
	admin := c.clusterAdmin(ctx)
	c.startServices()
	plan := targets(r, k)
	paths, _ := splitFixture(t, brokerSet.fixture(t), 2*k)
	validator := c.procs[0]
	faults := 0
	began := time.Now()
	var steps []string // how long each chunk's ingest and each fault took: where a slow run spent its time
	for i := range paths {
		hold := i%2 == 0 && faults < k
		if hold {
			validator.signal(syscall.SIGSTOP)
		}
		at := time.Now()
		c.startIngestArgs(ctx, chunkArgs(paths, i)...).wait()
		steps = append(steps, fmt.Sprintf("ingest %s", time.Since(at).Round(100*time.Millisecond)))
		if !hold {
			continue
		}
		validator.signal(syscall.SIGCONT)
		if n, known := pending(ctx, admin); known && n == 0 {
			t.Fatalf("chunk %d: nothing pending although the validator was held while it was ingested", i)
		}
		at = time.Now()
		fault(c, ctx, r, admin, plan[faults])
		steps = append(steps, fmt.Sprintf("fault %s", time.Since(at).Round(100*time.Millisecond)))
		faults++
	}
	t.Logf("chunks and faults done after %s: %s", time.Since(began).Round(100*time.Millisecond), strings.Join(steps, ", "))
	c.verdict(ctx, admin, kind+" during delivery", faults, k, "while the services delivered")
}

func sigkill(c *clusterDeployment, ctx context.Context, r *rand.Rand, admin *connect.Conn, target string) {
	c.killNode(ctx, r, admin, c.victim(ctx, r, admin, target))
}

func sigstop(c *clusterDeployment, ctx context.Context, r *rand.Rand, admin *connect.Conn, target string) {
	c.stallNode(ctx, admin, c.victim(ctx, r, admin, target))
}

func TestClusterSIGKILLDuringIngest(t *testing.T) {
	clusterIngestFaults(t, 9, "SIGKILLs", sigkill)
}

func TestClusterSIGSTOPDuringIngest(t *testing.T) {
	clusterIngestFaults(t, 6, "SIGSTOPs of 6 s", sigstop)
}

func TestClusterSIGKILLDuringDelivery(t *testing.T) {
	clusterDeliveryFaults(t, 9, "SIGKILLs", sigkill)
}

func TestClusterSIGSTOPDuringDelivery(t *testing.T) {
	clusterDeliveryFaults(t, 6, "SIGSTOPs of 6 s", sigstop)
}

// unconfirmedRe matches receiptctl ingest's message naming the first
// record it could not confirm stored (pkg/ingest.UnconfirmedError).
var unconfirmedRe = regexp.MustCompile(`record at line (\d+) \(event_id "([^"]*)"\) not confirmed stored in RAW`)

// TestClusterIngestQuorumLost stops two of the three nodes mid-ingest:
// RAW has no quorum, so receiptctl ingest cannot confirm what it sends and
// must exit 1 naming the first unconfirmed record (line and event id),
// with every earlier record in RAW (docs/spec.md §4). With the nodes back, the
// file published again gives the clean run's windows.
func TestClusterIngestQuorumLost(t *testing.T) {
	t.Parallel()
	brokerSet.cleanRun(t)
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	c := deployCluster(t, ctx)
	admin := c.clusterAdmin(ctx)
	path := brokerSet.fixture(t)

	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, filepath.Join(binaries(t), "receiptctl"), "ingest", "--events", path,
		"--nats-url", c.natsURL, "--partitions", "8", "--end-of-stream", "--retry-for", "10s")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// Two nodes go once a third of the input is in RAW; which two is
	// random, the leader of RAW among them or not.
	for {
		n, err := rawStored(ctx, admin)
		if err == nil && n >= brokerEvents/3 {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("ingest ended before the nodes were stopped: %v\n%s", err, out.String())
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(probeEvery):
		}
	}
	r := chaosRand(t)
	keep := r.IntN(3)
	for i, n := range c.nodes {
		if i != keep {
			n.Kill()
		}
	}
	t.Logf("killed every node but %s", c.nodes[keep].Name())
	err := <-exited
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("ingest with two of three nodes down: %v, want exit status 1\n%s", err, tailOf(out.Bytes(), 3000))
	}
	m := unconfirmedRe.FindSubmatch(out.Bytes())
	if m == nil {
		t.Fatalf("ingest exited 1 without naming the first unconfirmed record:\n%s", tailOf(out.Bytes(), 3000))
	}
	line, _ := strconv.Atoi(string(m[1]))
	id := string(m[2])
	t.Logf("ingest exited 1: first unconfirmed record at line %d, event_id %q", line, id)

	for i, n := range c.nodes {
		if i != keep {
			n.Restart(t)
		}
	}
	c.waitCurrent(ctx, admin)
	requireRAWBefore(t, ctx, admin, path, line, id)

	// The operator re-runs ingest (the whole file: what RAW has is
	// dropped as a duplicate) and starts the services.
	c.startIngestArgs(ctx, "--events", path, "--end-of-stream").wait()
	c.startServices()
	o := c.outcome(ctx, admin, brokerSet)
	o.require(t)
}

// requireRAWBefore fails t unless line of the file at path has event_id
// id and every record before it is in RAW.
func requireRAWBefore(t *testing.T, ctx context.Context, admin *connect.Conn, path string, line int, id string) {
	t.Helper()
	want := lineIDs(t, path)
	if line < 1 || line > len(want) {
		t.Fatalf("line %d is not a line of the file (%d lines)", line, len(want))
	}
	if want[line-1] != id {
		t.Fatalf("line %d of the file has event_id %q, ingest named %q", line, want[line-1], id)
	}
	// Right after a fault the first consumer requests may find no one to
	// answer them yet.
	var held map[string]bool
	testenv.CheckFor(t, currentTimeout, 200*time.Millisecond, func() error {
		held = map[string]bool{}
		return stream.ReadAll(ctx, admin.JS, wire.For("").Stream(wire.Raw), func(m jetstream.Msg) error {
			var ev struct {
				EventID string `json:"event_id"`
			}
			if json.Unmarshal(m.Data(), &ev) == nil && ev.EventID != "" {
				held[ev.EventID] = true
			}
			return nil
		})
	})
	var missing []string
	for i, ev := range want[:line-1] {
		if ev != "" && !held[ev] {
			missing = append(missing, fmt.Sprintf("line %d %s", i+1, ev))
		}
	}
	if len(missing) > 0 {
		t.Fatalf("%d records before line %d are not in RAW, e.g. %v", len(missing), line, missing[:min(len(missing), 10)])
	}
}

// lineIDs returns the event_id of every line of the file ("" for a line
// without a readable one).
func lineIDs(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ids []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var ev struct {
			EventID any `json:"event_id"`
		}
		id := ""
		if json.Unmarshal(sc.Bytes(), &ev) == nil {
			id, _ = ev.EventID.(string)
		}
		ids = append(ids, id)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// tailOf returns the last n bytes of b.
func tailOf(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// ldmConf shortens lame-duck mode for the rolling restart: the server
// waits lame_duck_grace_period before it starts closing clients, then
// closes them at most a second apart within lame_duck_duration (30 s is
// nats-server's minimum; with a handful of clients it leaves in seconds).
const ldmConf = "lame_duck_duration: \"30s\"\nlame_duck_grace_period: \"1s\"\n"

// TestClusterRollingRestart is the operator's upgrade path of
// docs/deployment.md ("Rolling restart"): while the input is ingested in
// chunks and the services deliver, each node in turn is put into lame-duck
// mode with `nats-server --signal ldm=PID` (it hands its stream and
// consumer leaderships over, then closes its clients and exits), started
// again on its store, and the next one goes only when every replica of RAW
// and VALID is current again. Nothing may be lost or counted twice.
func TestClusterRollingRestart(t *testing.T) {
	t.Parallel()
	brokerSet.cleanRun(t)
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	c := deployCluster(t, ctx, ldmConf)
	admin := c.clusterAdmin(ctx)
	c.startServices()
	ip := c.startChunkedIngest(ctx, brokerSet.fixture(t), 40, 600*time.Millisecond)
	natsServer := natsBin.Path(t)
	during := 0
	for i, n := range c.nodes {
		// The first node goes once ingest is under way.
		if i == 0 && !untilRAW(ctx, admin, ip, brokerEvents/10) {
			t.Fatal("ingest finished before the rolling restart began")
		}
		pid := n.PID()
		if pid == 0 {
			t.Fatalf("%s is not running", n.Name())
		}
		if out, err := exec.CommandContext(ctx, natsServer, "--signal", fmt.Sprintf("ldm=%d", pid)).CombinedOutput(); err != nil {
			t.Fatalf("nats-server --signal ldm=%d: %v\n%s", pid, err, out)
		}
		began := time.Now()
		select {
		case <-n.Exited():
		case <-time.After(60 * time.Second):
			t.Fatalf("%s still running 60 s after lame-duck mode began", n.Name())
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
		if !ip.finished() {
			during++
		}
		t.Logf("%s left lame-duck mode after %s", n.Name(), time.Since(began).Round(100*time.Millisecond))
		n.Restart(t)
		c.waitCurrent(ctx, admin)
	}
	ip.wait()
	c.logRestarts()
	t.Logf("%d of %d nodes restarted while ingest ran", during, len(c.nodes))
	o := c.outcome(ctx, admin, brokerSet)
	t.Logf("%d of %d windows equal the clean run's", o.equal, o.windows)
	o.require(t)
	if during < 2 {
		t.Fatalf("only %d of %d nodes were restarted while ingest ran", during, len(c.nodes))
	}
}
