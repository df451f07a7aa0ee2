package faults

// Network partitions (issue 23): the cluster shape of cluster_test.go with
// every node on a loopback address of its own and running as a uid of its
// own, so that an nftables table of the test's own, in the output hook,
// can cut one node off from its peers (its clients still reach it) or from
// everything, during ingest and during delivery. Every final window must
// equal the clean run's; no service process may exit; no windower may
// give the "checkpoint ahead of the stream" verdict; receiptctl ingest
// must never exit 1 while two nodes have a quorum.
// TestClusterPartitionIngestNode cuts off, again and again, the very node
// receiptctl ingest publishes through, and also checks RAW's order.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/e2e/faults/natsproc"
	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// partitionTimeout bounds the partition test from deployment to verdict.
const partitionTimeout = 8 * time.Minute

// partitionNet cuts nodes of a 3-node cluster off with nftables. Its
// table marks every connection when it starts: a route between nodes i
// and j (dialed by a node's uid to another node's address) with bits i
// and j, a client connection to node i (dialed by any other uid) with bit
// 8+i; a cut drops the connections of one node's bits, both directions.
// The addresses (127.a.b.1–3) and uids are random, so runs beside this
// one, with tables of their own, are not touched.
type partitionNet struct {
	t     *testing.T
	table string
	hosts []string
	uids  []uint32
	dir   string // reachable by the nodes' uids: their dirs and the binary
	bin   string
}

// newPartitionNet makes the table and the nodes' directory. Without nft or
// root it fails the test under CI=true, else skips it loudly.
func newPartitionNet(t *testing.T, n int) *partitionNet {
	t.Helper()
	pn, err := tryPartitionNet(t, n)
	if err != nil {
		unavailable(t, err)
	}
	return pn
}

// tryPartitionNet is newPartitionNet returning why it cannot cut (no nft,
// not root, nft refused the table) instead of ending the test.
func tryPartitionNet(t *testing.T, n int) (*partitionNet, error) {
	t.Helper()
	nft, err := exec.LookPath("nft")
	if err == nil && os.Geteuid() != 0 {
		err = fmt.Errorf("not root (euid %d): nodes cannot run as their own uids", os.Geteuid())
	}
	if err != nil {
		return nil, err
	}
	pn := &partitionNet{t: t, table: fmt.Sprintf("receiptflow_partitions_%d_%d", os.Getpid(), rand.Uint32())}
	a, b := 1+rand.IntN(254), rand.IntN(256)
	base := uint32(0x60000000 + rand.IntN(1<<20)*4)
	var marks strings.Builder
	for i := range n {
		pn.hosts = append(pn.hosts, fmt.Sprintf("127.%d.%d.%d", a, b, i+1))
		pn.uids = append(pn.uids, base+uint32(i))
	}
	for i := range n {
		for j := range n {
			if i != j {
				fmt.Fprintf(&marks, "\t\tmeta skuid %d ip daddr %s ct mark set 0x%x\n", pn.uids[i], pn.hosts[j], 1<<i|1<<j)
			}
		}
	}
	uids := make([]string, n)
	for i, u := range pn.uids {
		uids[i] = fmt.Sprint(u)
	}
	for i := range n {
		fmt.Fprintf(&marks, "\t\tip daddr %s meta skuid != { %s } ct mark set 0x%x\n", pn.hosts[i], strings.Join(uids, ", "), 0x100<<i)
	}
	script := fmt.Sprintf("table inet %s {\n\tchain cut {\n\t}\n\tchain out {\n\t\ttype filter hook output priority 0; policy accept;\n%s\t\tjump cut\n\t}\n}\n", pn.table, marks.String())
	cmd := exec.Command(nft, "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("nft -f: %v: %s\n%s", err, out, script)
	}
	t.Cleanup(func() {
		if out, err := exec.Command(nft, "delete", "table", "inet", pn.table).CombinedOutput(); err != nil {
			t.Errorf("nft delete table %s: %v: %s", pn.table, err, out)
		}
	})
	if pn.dir, err = os.MkdirTemp("", "receiptflow-partitions-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(pn.dir) })
	if err := os.Chmod(pn.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	pn.bin = filepath.Join(pn.dir, "nats-server")
	if err := copyFile(natsBin.Path(t), pn.bin, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("partitions: nftables table %s, nodes on %v as uids %v", pn.table, pn.hosts, pn.uids)
	return pn, nil
}

// unavailable fails the test under CI=true and skips it loudly otherwise.
func unavailable(t *testing.T, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("the partition test needs nftables (nft) and root, with CI=true: %v", err)
	}
	t.Skipf("!!! the network-partition test was NOT run: it needs nftables (nft) and root !!! (%v)", err)
}

// node gives node i its address, uid and directory (natsproc.StartClusterWith).
func (pn *partitionNet) node(i int, o *natsproc.Options) {
	o.Host = pn.hosts[i]
	o.Credential = &syscall.Credential{Uid: pn.uids[i], Gid: pn.uids[i]}
	o.Dir = filepath.Join(pn.dir, fmt.Sprintf("n%d", i+1))
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		pn.t.Fatal(err)
	}
}

// cut cuts node i off from its peers, and with everything from its
// clients too, until heal.
func (pn *partitionNet) cut(i int, everything bool) {
	pn.t.Helper()
	rules := []string{fmt.Sprintf("ct mark and 0x%x == 0x%x drop", 1<<i, 1<<i)}
	if everything {
		rules = append(rules, fmt.Sprintf("ct mark and 0x%x == 0x%x drop", 0x100<<i, 0x100<<i))
	}
	for _, r := range rules {
		pn.nft("add rule inet " + pn.table + " cut " + r)
	}
}

// heal ends every cut.
func (pn *partitionNet) heal() { pn.nft("flush chain inet " + pn.table + " cut") }

func (pn *partitionNet) nft(cmd string) {
	pn.t.Helper()
	if out, err := exec.Command("nft", strings.Fields(cmd)...).CombinedOutput(); err != nil {
		pn.t.Fatalf("nft %s: %v: %s", cmd, err, out)
	}
}

func copyFile(from, to string, mode os.FileMode) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// partition is one episode of the schedule.
type partition struct {
	everything bool          // cut from everything, else from its peers only
	min, max   time.Duration // how long
	delivery   bool          // during delivery (no publish in flight), else during ingest
	target     string        // the stream whose leader is cut off
}

func (p partition) String() string {
	kind := "from its peers"
	if p.everything {
		kind = "from everything"
	}
	during := "ingest"
	if p.delivery {
		during = "delivery"
	}
	return fmt.Sprintf("the leader of %s cut off %s during %s", p.target, kind, during)
}

// partitionPlan: each kind of cut short (6–10 s) and long (35–40 s), in
// ingest and in delivery, the leaders of RAW and VALID each hit twice or
// more.
var partitionPlan = []partition{
	{everything: false, min: 6 * time.Second, max: 10 * time.Second, target: wire.Raw},
	{everything: true, min: 6 * time.Second, max: 10 * time.Second, target: wire.Valid},
	{everything: false, min: 35 * time.Second, max: 40 * time.Second, target: wire.Raw},
	{everything: true, min: 35 * time.Second, max: 40 * time.Second, delivery: true, target: wire.Valid},
	{everything: false, min: 6 * time.Second, max: 10 * time.Second, delivery: true, target: wire.Valid},
}

// partitionChunks is how many receiptctl ingest runs publish the input.
const partitionChunks = 8

// TestClusterPartitions runs partitionPlan on one deployment: for an
// ingest episode a chunk's ingest runs and the cut begins once RAW has
// grown by a quarter of the chunk; for a delivery one the validator is
// held (SIGSTOP) while a chunk is ingested, continued, and the cut begins
// at once. After each heal the next episode waits until every replica of
// RAW and VALID is current.
func TestClusterPartitions(t *testing.T) {
	pn := newPartitionNet(t, 3)
	r := chaosRand(t)
	brokerSet.cleanRun(t)
	binaries(t)
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), partitionTimeout)
	defer cancel()
	c := deployClusterOn(t, ctx, pn.bin, pn.node)
	admin := c.clusterAdmin(ctx)
	c.startServices()
	paths, counts := splitFixture(t, brokerSet.fixture(t), partitionChunks)
	validator := c.procs[0]
	var ips []*ingestProc
	episode := func(e partition) {
		n := c.victim(ctx, r, admin, e.target)
		i := 0
		for i < len(c.nodes) && c.nodes[i] != n {
			i++
		}
		d := e.min + time.Duration(r.Int64N(int64(e.max-e.min)))
		t.Logf("partition at %s: %s (%s) for %s", time.Since(began).Round(time.Second), e, n.Name(), d.Round(100*time.Millisecond))
		pn.cut(i, e.everything)
		time.Sleep(d) // the partition is the fault
		pn.heal()
		c.waitCurrent(ctx, admin)
	}
	for k, e := range partitionPlan {
		if !e.delivery {
			base, err := rawStored(ctx, admin)
			if err != nil {
				t.Fatal(err)
			}
			ip := c.startIngestArgs(ctx, chunkArgs(paths, k)...)
			if !untilRAW(ctx, admin, ip, base+uint64(counts[k]/4)) {
				t.Fatalf("chunk %d was ingested before the partition began", k)
			}
			episode(e)
			ip.wait()
			ips = append(ips, ip)
			continue
		}
		validator.signal(syscall.SIGSTOP)
		ip := c.startIngestArgs(ctx, chunkArgs(paths, k)...)
		ip.wait()
		ips = append(ips, ip)
		validator.signal(syscall.SIGCONT)
		if n, known := pending(ctx, admin); known && n == 0 {
			t.Fatalf("chunk %d: nothing pending although the validator was held while it was ingested", k)
		}
		episode(e)
	}
	for k := len(partitionPlan); k < len(paths); k++ {
		ip := c.startIngestArgs(ctx, chunkArgs(paths, k)...)
		ip.wait()
		ips = append(ips, ip)
	}
	t.Logf("input ingested at %s", time.Since(began).Round(time.Second))
	c.logRestarts()
	c.logHits("partitions", len(partitionPlan))
	o := c.outcome(ctx, admin, brokerSet)
	t.Logf("%d of %d windows equal the clean run's", o.equal, o.windows)
	stale, moves := c.serviceVerdict(t)
	for k, ip := range ips {
		if f := ip.failures(); f > 0 {
			b, _ := os.ReadFile(ip.log)
			t.Errorf("receiptctl ingest of chunk %d failed %d times with a quorum up:\n%s", k, f, tailOf(b, 3000))
		}
	}
	t.Logf("partitions: %d episodes in %s; %d stale stream answers taken for stale, %d moves to another server",
		len(partitionPlan), time.Since(began).Round(time.Second), stale, moves)
	o.require(t)
	c.requireHits(t)
}

// serviceVerdict fails t when a service process exited or a windower gave
// the "checkpoint ahead of the stream" verdict, and returns how many stale
// stream answers the services took for stale and how many times they moved
// to another server, as their logs say.
func (c *clusterDeployment) serviceVerdict(t *testing.T) (stale, moves int) {
	t.Helper()
	for _, p := range c.procs {
		b, err := os.ReadFile(p.log.Name())
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "ahead of the stream") {
			t.Errorf("%s gave the \"checkpoint ahead of the stream\" verdict:\n%s", p.name, p.lastErrors(3))
		}
		stale += strings.Count(string(b), "not confirmed by the stream's leader")
		moves += strings.Count(string(b), "leaving the NATS server")
		if p.Restarts() > 0 {
			t.Errorf("%s exited %d times:\n%s", p.name, p.Restarts(), p.lastErrors(3))
		}
	}
	return stale, moves
}

// ingestNodePlan is TestClusterPartitionIngestNode's episodes, one input
// chunk each: the --retry-for of each one's receiptctl ingest, "" for its
// default, 30 s; RECEIPTFLOW_INGEST_NODE_EPISODES=N (make chaos: 12) runs
// N episodes, alternating the two, instead of these three. At 30 s the client's move to the next server after a
// third of --retry-for (connect.MoveOn, 10 s) finds RAW's new leader (4–9 s
// after the cut) in time by itself: ingest is done about 10 s after the
// cut with or without the retries past --retry-for. At 6 s the election
// often outlasts --retry-for, so that what keeps ingest from exiting 1 is
// that it retries again while RAW's leader answers STREAM.INFO within
// another --retry-for (stream.CommitterConfig.WhileStream); without it,
// ingest exited 1 in 2 of 3 such episodes. (At 5 s, no longer than one
// publish attempt's 5 s timeout, the client gives up before it has left
// the node at all, and exits 1 even so.)
func ingestNodePlan(t *testing.T) []string {
	plan := []string{"6s", "", "6s"}
	if v := os.Getenv("RECEIPTFLOW_INGEST_NODE_EPISODES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("RECEIPTFLOW_INGEST_NODE_EPISODES=%q: want a positive number", v)
		}
		plan = make([]string, n)
		for k := range plan {
			if k%2 == 0 {
				plan[k] = "6s"
			}
		}
	}
	return plan
}

// ingestNodeEpisode bounds one episode of TestClusterPartitionIngestNode:
// it takes 40–50 s (a 35–40 s cut, the node catching up, the next chunk's
// start).
const ingestNodeEpisode = 2 * time.Minute

// TestClusterPartitionIngestNode: receiptctl ingest never exits 1 while a
// quorum is reachable (docs/spec.md §4), also when the node it publishes
// through is cut off from everything for longer than its --retry-for. In
// each episode of ingestNodePlan one chunk of the input is ingested by
// receiptctl ingest (the real binary) given only the URL of the node that
// leads RAW — nats.go shuffles a list of URLs, so listing that node first
// would not make it the one the client connects to; the client learns the
// other two nodes from the cluster (discovered servers), as any client
// does. Once RAW has grown by a quarter of the chunk that node is cut off
// from everything for 35–40 s, while the other two keep a quorum and elect
// RAW's new leader. Every run must exit 0 (a failed run is started again,
// as an operator would, and counted); then RAW must hold every record of
// the input exactly once, in file order per partition, and every final
// window must equal the clean run's. Like TestClusterPartitions it is
// serial and needs root and nft.
func TestClusterPartitionIngestNode(t *testing.T) {
	pn := newPartitionNet(t, 3)
	r := chaosRand(t)
	brokerSet.cleanRun(t)
	binaries(t)
	began := time.Now()
	plan := ingestNodePlan(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute+time.Duration(len(plan))*ingestNodeEpisode)
	defer cancel()
	c := deployClusterOn(t, ctx, pn.bin, pn.node)
	admin := c.clusterAdmin(ctx)
	c.startServices()
	paths, counts := splitFixture(t, brokerSet.fixture(t), len(plan))
	failedRuns, failedEpisodes, led, during := 0, 0, 0, 0
	var episodeTimes []string
	for k, retryFor := range plan {
		start := time.Now()
		var base uint64
		testenv.CheckFor(t, currentTimeout, 50*time.Millisecond, func() error {
			var err error
			base, err = rawStored(ctx, admin)
			return err
		})
		n := c.victim(ctx, r, admin, wire.Raw)
		i := 0
		var others []string
		for j, m := range c.nodes {
			if m == n {
				i = j
			} else {
				others = append(others, m.URL())
			}
		}
		args := chunkArgs(paths, k)
		if retryFor != "" {
			args = append(args, "--retry-for", retryFor)
		} else {
			retryFor = "30s (default)"
		}
		through := &deployment{t: t, natsURL: n.URL()}
		ip := through.startIngestArgs(ctx, args...)
		if !untilRAW(ctx, admin, ip, base+uint64(counts[k]/4)) {
			t.Fatalf("episode %d: chunk %d was ingested before the cut began", k+1, k)
		}
		leads := c.leaderOf(ctx, admin, wire.Raw) == n
		if leads {
			led++
		}
		d := 35*time.Second + time.Duration(r.Int64N(int64(5*time.Second)))
		exited := make(chan time.Time, 1)
		go func() { <-ip.done; exited <- time.Now() }()
		cutAt := time.Now()
		pn.cut(i, true)
		elected := electedAfter(ctx, others, n.Name(), cutAt, d)
		time.Sleep(d) // the partition is the fault
		pn.heal()
		healed := time.Now()
		ip.wait()
		exitAt := <-exited
		c.waitCurrent(ctx, admin)
		b, _ := os.ReadFile(ip.log)
		// Kept beside the other logs (RECEIPTFLOW_FAULTS_KEEP_LOGS): the
		// next episode's ingest writes ingest.log anew.
		_ = os.WriteFile(filepath.Join(filepath.Dir(ip.log), fmt.Sprintf("ingest-episode-%d.log", k+1)), b, 0o644)
		when := fmt.Sprintf("%s after the cut began, during the cut", exitAt.Sub(cutAt).Round(100*time.Millisecond))
		if exitAt.After(healed) {
			when = fmt.Sprintf("%s after the cut began, %s after the heal", exitAt.Sub(cutAt).Round(100*time.Millisecond), exitAt.Sub(healed).Round(100*time.Millisecond))
		} else {
			during++
		}
		newLeader := "no new leader of RAW seen during the cut"
		if e := <-elected; e >= 0 {
			newLeader = fmt.Sprintf("RAW's leader on the other side %s after the cut began", e.Round(100*time.Millisecond))
		}
		took := time.Since(start).Round(time.Second)
		episodeTimes = append(episodeTimes, took.String())
		t.Logf("episode %d at %s: %s (leading RAW at the cut: %v), the node receiptctl ingest (--retry-for %s) publishes through, cut off from everything for %s; %s; ingest of chunk %d done %s, %d failed runs; episode %s",
			k+1, cutAt.Sub(began).Round(time.Second), n.Name(), leads, retryFor, d.Round(100*time.Millisecond), newLeader, k, when, ip.failures(), took)
		if f := ip.failures(); f > 0 {
			failedRuns += f
			failedEpisodes++
			t.Errorf("episode %d: receiptctl ingest --retry-for %s of chunk %d exited non-zero %d times with a quorum up:\n%s", k+1, retryFor, k, f, failureLines(b))
		}
	}
	t.Logf("input ingested at %s", time.Since(began).Round(time.Second))
	c.logRestarts()
	stale, moves := c.serviceVerdict(t)
	requireRAWFileOrder(t, ctx, admin, brokerSet.fixture(t))
	o := c.outcome(ctx, admin, brokerSet)
	t.Logf("%d of %d windows equal the clean run's", o.equal, o.windows)
	t.Logf("ingest node cut off: %d episodes in %s (each %s); the node led RAW at %d cuts; ingest finished during the cut %d times; %d of %d episodes had a failed ingest run (%d runs in all); services: %d stale stream answers taken for stale, %d moves to another server",
		len(paths), time.Since(began).Round(time.Second), strings.Join(episodeTimes, ", "), led, during, failedEpisodes, len(paths), failedRuns, stale, moves)
	o.require(t)
}

// electedAfter watches, through the nodes at urls, for a leader of RAW
// other than old, for up to d after since; it sends how long after since
// one was named, or -1 if none was.
func electedAfter(ctx context.Context, urls []string, old string, since time.Time, d time.Duration) <-chan time.Duration {
	out := make(chan time.Duration, 1)
	go func() {
		watch, err := connect.ConnectNATS(strings.Join(urls, ","), "faults-election-watch")
		if err != nil {
			out <- -1
			return
		}
		defer watch.Close()
		for time.Since(since) < d && ctx.Err() == nil {
			ictx, cancel := context.WithTimeout(ctx, time.Second)
			s, err := watch.JS.Stream(ictx, wire.For("").Stream(wire.Raw))
			cancel()
			if err == nil {
				if cl := s.CachedInfo().Cluster; cl != nil && cl.Leader != "" && cl.Leader != old {
					out <- time.Since(since)
					return
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		out <- -1
	}()
	return out
}

// failureLines returns why the failed runs of an ingest log failed: the
// line each run printed last before its "--- attempt N: <exit status>"
// line, with the status, each distinct one once with how many runs ended
// on it, in the order they first came.
func failureLines(log []byte) string {
	var order []string
	count := map[string]int{}
	lines := strings.Split(string(log), "\n")
	for i := 1; i < len(lines); i++ {
		l := lines[i]
		if !strings.HasPrefix(l, "--- attempt ") {
			continue
		}
		why := lines[i-1]
		if strings.HasPrefix(why, "--- [") {
			why = "(nothing printed)"
		}
		if _, status, ok := strings.Cut(l, ": "); ok {
			why += " [" + status + "]"
		}
		if count[why] == 0 {
			order = append(order, why)
		}
		count[why]++
	}
	out := make([]string, len(order))
	for k, why := range order {
		out[k] = fmt.Sprintf("%d runs: %s", count[why], why)
	}
	return tailOf([]byte(strings.Join(out, "\n")), 3000)
}

// requireRAWFileOrder fails t unless RAW holds every record of the file at
// path exactly once and, partition by partition, in the file's order. A
// record on RAW is its line's bytes (every line of the broker input has its
// ingested_at, so ingest stores it unchanged) or, cut to wire.KeepBytes, a
// prefix of them under wire.HdrOrigSize; a byte-identical retry of an
// earlier line is the same record (JetStream drops it by its Nats-Msg-Id).
func requireRAWFileOrder(t *testing.T, ctx context.Context, admin *connect.Conn, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(b, []byte("\n"))
	first := map[string]int{} // a record's bytes: its first line (0-based)
	byLen := map[int][]int{}  // first lines by length, for cut records
	for i, l := range lines {
		l = bytes.Trim(l, " \t\r\n")
		lines[i] = l
		if len(l) == 0 {
			continue
		}
		if _, ok := first[string(l)]; !ok {
			first[string(l)] = i
			byLen[len(l)] = append(byLen[len(l)], i)
		}
	}
	type rec struct {
		seq  uint64
		line int
	}
	var parts map[int][]rec
	var copies map[int]int // by first line
	var unknown []string
	readAgain(t, "RAW", func() error {
		parts, copies, unknown = map[int][]rec{}, map[int]int{}, nil
		return stream.ReadAll(ctx, admin.JS, wire.For("").Stream(wire.Raw), func(m jetstream.Msg) error {
			meta, err := m.Metadata()
			if err != nil {
				return err
			}
			seq := meta.Sequence.Stream
			if m.Headers().Get(wire.HdrHeartbeat) != "" {
				return nil
			}
			subj := m.Subject()
			p, err := strconv.Atoi(subj[strings.LastIndexByte(subj, '.')+1:])
			if err != nil {
				unknown = append(unknown, fmt.Sprintf("seq %d on %s", seq, subj))
				return nil
			}
			line, ok := first[string(m.Data())]
			if s := m.Headers().Get(wire.HdrOrigSize); s != "" {
				size, _ := strconv.Atoi(s)
				ok = false
				for _, i := range byLen[size] {
					if bytes.HasPrefix(lines[i], m.Data()) {
						line, ok = i, true
						break
					}
				}
			}
			if !ok {
				unknown = append(unknown, fmt.Sprintf("seq %d on %s: %.80q", seq, subj, m.Data()))
				return nil
			}
			copies[line]++
			parts[p] = append(parts[p], rec{seq, line})
			return nil
		})
	})
	var twice, missing, disorder []string
	for i, l := range lines {
		if len(l) == 0 || first[string(l)] != i {
			continue
		}
		switch n := copies[i]; {
		case n == 0:
			missing = append(missing, fmt.Sprintf("line %d", i+1))
		case n > 1:
			twice = append(twice, fmt.Sprintf("line %d (%d copies)", i+1, n))
		}
	}
	held := 0
	for p, rs := range parts {
		held += len(rs)
		for j := 1; j < len(rs); j++ {
			if rs[j].line <= rs[j-1].line {
				disorder = append(disorder, fmt.Sprintf("partition %d: line %d at seq %d after line %d at seq %d", p, rs[j].line+1, rs[j].seq, rs[j-1].line+1, rs[j-1].seq))
			}
		}
	}
	sort.Strings(disorder)
	t.Logf("RAW: %d records of %d distinct lines, %d partitions; %d missing, %d stored more than once, %d out of file order, %d not of the file",
		held, len(first), len(parts), len(missing), len(twice), len(disorder), len(unknown))
	failed := false
	for _, f := range []struct {
		what string
		l    []string
	}{{"not in RAW", missing}, {"in RAW more than once", twice}, {"out of file order in RAW", disorder}, {"in RAW but not of the file", unknown}} {
		if len(f.l) > 0 {
			t.Errorf("%d records %s, e.g. %v", len(f.l), f.what, f.l[:min(len(f.l), 10)])
			failed = true
		}
	}
	if failed {
		t.FailNow()
	}
}
