package faults

// Shared pieces of the cluster fault tests (cluster_test.go, issue 16): the
// shape docs/deployment.md ships — three nats-server processes routed on
// loopback, each on its own file store (sync_interval always), every stream
// and bucket at R3 made by the set-up job (validator --ensure-only
// --replicas 3), a real redis-server, the services as processes given all
// three URLs — and faults aimed at a random node or at the leader of RAW
// or VALID as stream info names it.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/e2e/faults/natsproc"
	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// clusterTimeout bounds one cluster test from deployment to verdict.
const clusterTimeout = 5 * time.Minute

// clusterDeployment is a deployment whose NATS is a 3-node cluster.
type clusterDeployment struct {
	*deployment
	nodes []*natsproc.Server
	// hits counts the faults that hit the leader of RAW and of VALID.
	rawHits, validHits int
}

// deployCluster starts the three nodes and redis-server (AOF, appendfsync
// always) and runs the set-up job; the services are left to
// startServices. Every service gets RECEIPTS_REPLICAS=3 too, so the
// streams it ensures at start stay at R3.
func deployCluster(t *testing.T, ctx context.Context, extra ...string) *clusterDeployment {
	t.Helper()
	return deployClusterOn(t, ctx, natsBin.Path(t), nil, extra...)
}

// deployClusterOn is deployCluster with the nats-server binary natsServer
// and node, if not nil, adjusting each node's options before its first
// start (natsproc.StartClusterWith).
func deployClusterOn(t *testing.T, ctx context.Context, natsServer string, node func(int, *natsproc.Options), extra ...string) *clusterDeployment {
	t.Helper()
	bin := binaries(t)
	nodes, urls := natsproc.StartClusterWith(t, natsServer, 3, node, extra...)
	d := &deployment{t: t, natsURL: urls, redis: testenv.RedisServer(t, testenv.WithAOF())}
	d.env = []string{"NATS_URL=" + urls, "REDIS_URL=" + d.redis.URL(), "RECEIPTS_FAILPOINTS=", "RECEIPTS_REPLICAS=3"}
	c := &clusterDeployment{deployment: d, nodes: nodes}
	// The set-up job, as an operator runs it: a fresh cluster may still be
	// electing its meta leader, so it is retried a few times.
	var out []byte
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		jobCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		cmd := exec.CommandContext(jobCtx, filepath.Join(bin, "validator"), "--ensure-only", "--replicas", "3")
		cmd.Env = append(os.Environ(), d.env...)
		out, err = cmd.CombinedOutput()
		cancel()
		if err == nil {
			return c
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("set-up job validator --ensure-only --replicas 3: %v\n%s", err, out)
	return nil
}

// clusterAdmin connects the test's own client to all three nodes. Unlike
// deployment.admin it ensures nothing (that would be at R1): it checks
// that the set-up job made RAW and VALID at R3.
func (c *clusterDeployment) clusterAdmin(ctx context.Context) *connect.Conn {
	t := c.t
	t.Helper()
	admin, err := connect.ConnectNATS(c.natsURL, "faults-admin")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	for _, base := range []string{wire.Raw, wire.Valid} {
		// Each request gets its own deadline: one sent while the cluster
		// is still settling may never be answered (a chaos round waited
		// its whole 10 minutes on one).
		var replicas int
		testenv.CheckFor(t, currentTimeout, 100*time.Millisecond, func() error {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			s, err := admin.JS.Stream(rctx, wire.For("").Stream(base))
			if err != nil {
				return fmt.Errorf("stream %s: %w", base, err)
			}
			replicas = s.CachedInfo().Config.Replicas
			return nil
		})
		if replicas != 3 {
			t.Fatalf("stream %s has %d replicas, want 3 (set-up job --replicas 3)", base, replicas)
		}
	}
	return admin
}

// leaderOf returns the node that leads the stream base now, or nil when
// stream info does not name one (an election, or no quorum).
func (c *clusterDeployment) leaderOf(ctx context.Context, admin *connect.Conn, base string) *natsproc.Server {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s, err := admin.JS.Stream(ctx, wire.For("").Stream(base))
	if err != nil {
		return nil
	}
	info := s.CachedInfo()
	if info.Cluster == nil {
		return nil
	}
	for _, n := range c.nodes {
		if n.Name() == info.Cluster.Leader {
			return n
		}
	}
	return nil
}

// targets is the victim plan of k faults: the leader of RAW twice, of
// VALID twice, a random node for the rest, in a random order. "" is a
// random node.
func targets(r *rand.Rand, k int) []string {
	plan := make([]string, k)
	for i := range plan {
		switch {
		case i < 2:
			plan[i] = wire.Raw
		case i < 4:
			plan[i] = wire.Valid
		}
	}
	r.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
	return plan
}

// victim picks the node a fault hits (target from targets) and counts
// whether it leads RAW and VALID at that moment.
func (c *clusterDeployment) victim(ctx context.Context, r *rand.Rand, admin *connect.Conn, target string) *natsproc.Server {
	var n *natsproc.Server
	for try := 0; n == nil && try < 50 && target != ""; try++ {
		if n = c.leaderOf(ctx, admin, target); n == nil {
			time.Sleep(100 * time.Millisecond) // an election in progress
		}
	}
	if n == nil {
		n = c.nodes[r.IntN(len(c.nodes))]
	}
	if c.leaderOf(ctx, admin, wire.Raw) == n {
		c.rawHits++
	}
	if c.leaderOf(ctx, admin, wire.Valid) == n {
		c.validHits++
	}
	return n
}

// killNode SIGKILLs a node, leaves it down 0.5–1 s and starts it again on
// its store; then waits until every replica of RAW and VALID is current,
// so that the next fault again takes one node of three.
func (c *clusterDeployment) killNode(ctx context.Context, r *rand.Rand, admin *connect.Conn, n *natsproc.Server) {
	t := c.t
	t.Helper()
	n.Kill()
	time.Sleep(time.Duration(500+r.IntN(500)) * time.Millisecond) // down time, part of the schedule
	n.Restart(t)
	c.waitCurrent(ctx, admin)
}

// stallNode stops a node (SIGSTOP) for 6 s and continues it (SIGCONT),
// then waits as killNode does.
func (c *clusterDeployment) stallNode(ctx context.Context, admin *connect.Conn, n *natsproc.Server) {
	t := c.t
	t.Helper()
	if err := n.Pause(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(6 * time.Second) // the stall is the fault
	if err := n.Resume(); err != nil {
		t.Fatal(err)
	}
	c.waitCurrent(ctx, admin)
}

// currentTimeout bounds the wait for the replicas to catch up after a fault.
const currentTimeout = 60 * time.Second

// waitCurrent waits until RAW and VALID each have a leader and every
// replica reports current.
func (c *clusterDeployment) waitCurrent(ctx context.Context, admin *connect.Conn) {
	t := c.t
	t.Helper()
	testenv.CheckFor(t, currentTimeout, 50*time.Millisecond, func() error {
		for _, base := range []string{wire.Raw, wire.Valid} {
			ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
			s, err := admin.JS.Stream(ictx, wire.For("").Stream(base))
			cancel()
			if err != nil {
				return fmt.Errorf("%s: %w", base, err)
			}
			cl := s.CachedInfo().Cluster
			if cl == nil || cl.Leader == "" {
				return fmt.Errorf("%s has no leader", base)
			}
			if len(cl.Replicas) != 2 {
				return fmt.Errorf("%s: %d followers known, want 2", base, len(cl.Replicas))
			}
			for _, p := range cl.Replicas {
				if !p.Current || p.Offline {
					return fmt.Errorf("%s: replica %s not current", base, p.Name)
				}
			}
		}
		return nil
	})
}

// splitFixture writes the dataset's fixture as n files of consecutive
// lines and returns their paths and line counts.
func splitFixture(t *testing.T, path string, n int) ([]string, []int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var lines [][]byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, append([]byte(nil), sc.Bytes()...))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	paths, counts := make([]string, n), make([]int, n)
	for i := range n {
		lo, hi := i*len(lines)/n, (i+1)*len(lines)/n
		paths[i] = filepath.Join(dir, fmt.Sprintf("chunk-%02d.ndjson", i))
		counts[i] = hi - lo
		var buf bytes.Buffer
		for _, l := range lines[lo:hi] {
			buf.Write(l)
			buf.WriteByte('\n')
		}
		if err := os.WriteFile(paths[i], buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return paths, counts
}

// startIngestArgs is startIngest with its own arguments after "ingest".
func (d *deployment) startIngestArgs(ctx context.Context, args ...string) *ingestProc {
	return d.startIngestRuns(ctx, 0, args)
}

// chunkedIngest publishes the fixture in chunks, one receiptctl ingest
// (restarted until it exits 0) after another, the last with
// --end-of-stream. Before the chunks named by faultAt it waits until RAW
// has grown by a quarter of the chunk (a publish is in flight) and calls
// fault. It returns how many faults happened with ingest running.
func (c *clusterDeployment) chunkedIngest(ctx context.Context, admin *connect.Conn, path string, chunks int, faultAt map[int]bool, fault func()) int {
	t := c.t
	t.Helper()
	paths, counts := splitFixture(t, path, chunks)
	faults := 0
	for i := range paths {
		var base uint64
		if faultAt[i] {
			testenv.CheckFor(t, currentTimeout, 50*time.Millisecond, func() error {
				var err error
				base, err = rawStored(ctx, admin)
				return err
			})
		}
		ip := c.startIngestArgs(ctx, chunkArgs(paths, i)...)
		if faultAt[i] && untilRAW(ctx, admin, ip, base+uint64(counts[i]/4)) {
			fault()
			faults++
		}
		ip.wait()
	}
	return faults
}

// verdict ends a fault test: it logs the restarts and the faults'
// victims, requires the outcome to equal the clean run, that all k faults
// happened (while: when they had to) and that each leader was hit twice.
func (c *clusterDeployment) verdict(ctx context.Context, admin *connect.Conn, kind string, faults, k int, while string) {
	t := c.t
	t.Helper()
	c.logRestarts()
	c.logHits(kind, faults)
	o := c.outcome(ctx, admin, brokerSet)
	t.Logf("%d of %d windows equal the clean run's", o.equal, o.windows)
	o.require(t)
	if faults < k {
		t.Fatalf("only %d of %d faults happened %s", faults, k, while)
	}
	c.requireHits(t)
}

// logHits logs the faults' victims.
func (c *clusterDeployment) logHits(kind string, n int) {
	c.t.Logf("%d %s; %d hit the leader of RAW, %d the leader of VALID", n, kind, c.rawHits, c.validHits)
}

// requireHits fails the test unless each leader was hit at least twice.
func (c *clusterDeployment) requireHits(t *testing.T) {
	t.Helper()
	if c.rawHits < 2 || c.validHits < 2 {
		t.Fatalf("the leaders were not hit enough: RAW %d, VALID %d (want ≥ 2 each)", c.rawHits, c.validHits)
	}
}
