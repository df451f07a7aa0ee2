package faults

// Network partitions (issue 23): the cluster shape of cluster_test.go with
// every node on a loopback address of its own and running as a uid of its
// own, so that an nftables table of the test's own, in the output hook,
// can cut one node off from its peers (its clients still reach it) or from
// everything, during ingest and during delivery. Every final window must
// equal the clean run's; no service process may exit; no windower may
// give the "checkpoint ahead of the stream" verdict; receiptctl ingest
// must never exit 1 while two nodes have a quorum.

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/e2e/faults/natsproc"
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
	stale, moves := 0, 0
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
