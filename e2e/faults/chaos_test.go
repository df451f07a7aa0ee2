//go:build chaos

package faults

// The chaos soak (`make chaos`, not in CI): rounds of the broker input,
// each on a fresh deployment (real nats-server process with sync_interval
// always, redis-server with appendfsync always, the services as processes,
// receiptctl ingest as a process), while random SIGKILLs hit every process
// — validator, both windowers, publisher, nats-server, redis-server and
// ingest while it runs — until the input has drained. Rounds go on until
// at least RECEIPTFLOW_CHAOS_KILLS kills (default 100) were made. Every
// round is compared with the clean run; the last line is the summary:
//
//	chaos: seed S, N rounds, K kills (validator a, windower b, …), E events, W/T windows equal, L lost, D double counted, parity failed F, duration
//
// "lost" and "double counted" are the counts a window is short of, or
// beyond, the clean run's, summed over windows.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// chaosRoundTimeout bounds one round from deployment to verdict.
const chaosRoundTimeout = 10 * time.Minute

// chaosChunks and chaosChunkGap shape a round's ingest: the input in 40
// files, 200 ms apart.
const (
	chaosChunks   = 40
	chaosChunkGap = 200 * time.Millisecond
)

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, s)
	}
	return n
}

// chaosFigures accumulates the rounds of one soak.
type chaosFigures struct {
	rounds, events, windows, equal, parityFailed int
	lost, double                                 int64
	kills                                        map[string]int
	noun                                         string // "kills", or "faults" where stalls count too
}

func (f *chaosFigures) total() int {
	n := 0
	for _, k := range f.kills {
		n += k
	}
	return n
}

func (f *chaosFigures) String() string {
	var names []string
	for n := range f.kills {
		names = append(names, n)
	}
	sort.Strings(names)
	var per []string
	for _, n := range names {
		per = append(per, fmt.Sprintf("%s %d", n, f.kills[n]))
	}
	return fmt.Sprintf("%d rounds, %d %s (%s), %d events, %d/%d windows equal, %d lost, %d double counted, parity failed %d",
		f.rounds, f.total(), f.noun, strings.Join(per, ", "), f.events, f.equal, f.windows, f.lost, f.double, f.parityFailed)
}

func TestChaos(t *testing.T) {
	chaosSoak(t, "chaos", "kills", envInt(t, "RECEIPTFLOW_CHAOS_KILLS", 100), chaosRound)
}

// TestChaosCluster is the soak in the cluster shape of docs/deployment.md
// (three nats-server nodes, R3): the faults are SIGKILLs and SIGSTOP
// stalls of random nodes, services, redis-server and ingest.
func TestChaosCluster(t *testing.T) {
	chaosSoak(t, "chaos cluster", "faults", envInt(t, "RECEIPTFLOW_CHAOS_KILLS", 100), chaosClusterRound)
}

// TestChaosRedisFailover is the soak with Redis failovers as the nemesis:
// the services reach Redis through Sentinel, and every 1–3 s the
// replication stream is cut for 0.5–3 s, the master SIGKILLed and the
// replica promoted, after which the dead node comes back empty as the new
// replica. The input is lossSet and its conflicting copies, so lost claims
// would show as double counts. Rounds go on until
// RECEIPTFLOW_CHAOS_FAILOVERS failovers (default 10).
func TestChaosRedisFailover(t *testing.T) {
	chaosSoak(t, "chaos redis failover", "failovers", envInt(t, "RECEIPTFLOW_CHAOS_FAILOVERS", 10), chaosRedisRound)
}

// TestChaosElastic is the soak with membership changes as the nemesis
// (docs/spec.md §9): validators and windowers in group mode (leases of
// elasticTTL), and every 0.5–2 s a random kind gets a join, a SIGTERM
// leave, a SIGKILL without restart or a SIGSTOP stall of 0.5 s to three
// lease periods (past its lease or not), keeping one to three members of
// each kind. Each round also measures the unowned waits (elastic_test.go)
// and requires them within lease-ttl plus the hand-over bound.
func TestChaosElastic(t *testing.T) {
	chaosSoak(t, "chaos elastic", "changes", envInt(t, "RECEIPTFLOW_CHAOS_KILLS", 100), chaosElasticRound)
}

// chaosSoak runs rounds until at least target faults were made and prints
// the summary line, headed label.
func chaosSoak(t *testing.T, label, noun string, target int, round func(*testing.T, *rand.Rand, *chaosFigures)) {
	seed := chaosSeed(t)
	r := rand.New(rand.NewPCG(seed, seed^0x5eed))
	maxRounds := envInt(t, "RECEIPTFLOW_CHAOS_ROUNDS", 20)
	brokerSet.cleanRun(t)
	began := time.Now()
	fig := &chaosFigures{kills: map[string]int{}, noun: noun}
	for n := 1; fig.total() < target && n <= maxRounds; n++ {
		t.Run(fmt.Sprintf("round%d", n), func(t *testing.T) { round(t, r, fig) })
	}
	line := fmt.Sprintf("%s: seed %d, %s, %s", label, seed, fig, time.Since(began).Round(time.Second))
	t.Log(line)
	fmt.Println(line)
	if fig.total() < target {
		t.Errorf("only %d %s in %d rounds (want %d)", fig.total(), fig.noun, fig.rounds, target)
	}
}

// chaosRound runs the input once through a fresh deployment under random
// SIGKILLs and adds its figures to fig.
func chaosRound(t *testing.T, r *rand.Rand, fig *chaosFigures) {
	d := deployWith(t, setup{broker: true, aof: true})
	ctx, cancel := context.WithTimeout(context.Background(), chaosRoundTimeout)
	defer cancel()
	admin := d.admin(ctx)
	// The input comes as chaosChunks files, one receiptctl ingest each,
	// so that ingest runs through much of the round and is killed as
	// often as any other process.
	ip := d.startChunkedIngest(ctx, brokerSet.fixture(t), chaosChunks, chaosChunkGap)
	victims := []string{"validator", "windower-0", "windower-1", "publisher", "nats-server", "redis-server", "ingest"}
	kills := map[string]int{}
	for ctx.Err() == nil {
		time.Sleep(time.Duration(100+r.IntN(300)) * time.Millisecond) // the schedule's interval
		if ip.finished() {
			if n, known := pending(ctx, admin); known && n == 0 {
				break
			}
		}
		v := victims[r.IntN(len(victims))]
		switch v {
		case "validator":
			d.procs[0].kill()
		case "windower-0":
			d.procs[1].kill()
		case "windower-1":
			d.procs[2].kill()
		case "publisher":
			d.procs[3].kill()
		case "nats-server":
			d.killNATS(t, r)
		case "redis-server":
			d.killRedis(t)
		case "ingest":
			if !ip.killNext(ctx, time.Second) {
				continue // over, or between runs for a second: nothing to kill
			}
		}
		kills[v]++
	}
	ip.wait()
	fig.add(t, d.outcome(ctx, admin, brokerSet), kills, brokerEvents)
}

// add records one round's outcome and faults, logs them, and fails the
// round if it differs from the clean run.
func (fig *chaosFigures) add(t *testing.T, o *outcome, kills map[string]int, events int) {
	t.Helper()
	fig.rounds++
	fig.events += events
	fig.windows += o.windows
	fig.equal += o.equal
	fig.lost += o.lost
	fig.double += o.double
	if !o.report.Holds {
		fig.parityFailed++
	}
	n := 0
	for v, k := range kills {
		fig.kills[v] += k
		n += k
	}
	t.Logf("round %d: %d "+fig.noun+" %v, %d/%d windows equal, %d lost, %d double counted, parity holds %v",
		fig.rounds, n, kills, o.equal, o.windows, o.lost, o.double, o.report.Holds)
	o.require(t)
}

// chaosClusterRound is chaosRound in the cluster shape: every 100–400 ms
// a random process gets a SIGKILL or a SIGSTOP stall of 0.5–3 s: a
// service (restarted by its supervisor), one of the three nodes
// (restarted on its store after 0.3–1 s), redis-server or the running
// ingest; or a random node is cut off by a network partition (nftables,
// partition_test.go), from its peers or from everything, for 1–10 s. One
// fault at a time; a node may still be catching up when the next fault
// hits another, so brief losses of quorum happen too. Without nft or root
// the partitions are left out, saying so.
func chaosClusterRound(t *testing.T, r *rand.Rand, fig *chaosFigures) {
	ctx, cancel := context.WithTimeout(context.Background(), chaosRoundTimeout)
	defer cancel()
	victims := []string{"validator", "windower-0", "windower-1", "publisher", "node", "redis-server", "ingest"}
	pn, err := tryPartitionNet(t, 3)
	var c *clusterDeployment
	if err != nil {
		t.Logf("!!! no network partitions in this round: %v !!!", err)
		c = deployCluster(t, ctx)
	} else {
		victims = append(victims, "partition")
		c = deployClusterOn(t, ctx, pn.bin, pn.node)
	}
	admin := c.clusterAdmin(ctx)
	c.startServices()
	ip := c.startChunkedIngest(ctx, brokerSet.fixture(t), chaosChunks, chaosChunkGap)
	faults := map[string]int{}
	stall := func() time.Duration { return time.Duration(500+r.IntN(2500)) * time.Millisecond }
	for ctx.Err() == nil {
		time.Sleep(time.Duration(100+r.IntN(300)) * time.Millisecond) // the schedule's interval
		if ip.finished() {
			if n, known := pending(ctx, admin); known && n == 0 {
				break
			}
		}
		v := victims[r.IntN(len(victims))]
		stop := r.IntN(2) == 0
		kind := v + " kill"
		if stop {
			kind = v + " stop"
		}
		switch v {
		case "validator", "windower-0", "windower-1", "publisher":
			p := c.procs[map[string]int{"validator": 0, "windower-0": 1, "windower-1": 2, "publisher": 3}[v]]
			if stop {
				p.signal(syscall.SIGSTOP)
				time.Sleep(stall())
				p.signal(syscall.SIGCONT)
			} else {
				p.kill()
			}
		case "node":
			n := c.nodes[r.IntN(len(c.nodes))]
			if stop {
				if n.Pause() != nil {
					continue
				}
				time.Sleep(stall())
				n.Resume()
			} else {
				n.Kill()
				time.Sleep(time.Duration(300+r.IntN(700)) * time.Millisecond)
				if err := n.RestartErr(); err != nil {
					t.Fatal(err)
				}
			}
		case "redis-server":
			if stop {
				if c.redis.Signal(syscall.SIGSTOP) != nil {
					continue
				}
				time.Sleep(stall())
				c.redis.Signal(syscall.SIGCONT)
			} else {
				c.killRedis(t)
			}
		case "ingest":
			if stop && !ip.stallNext(ctx, time.Second, stall()) || !stop && !ip.killNext(ctx, time.Second) {
				continue // over, or between runs for a second
			}
		case "partition":
			// stop: cut off from everything, else from its peers.
			kind = map[bool]string{false: "partition from peers", true: "partition from everything"}[stop]
			pn.cut(r.IntN(len(c.nodes)), stop)
			time.Sleep(time.Duration(1000+r.IntN(9000)) * time.Millisecond) // the partition is the fault
			pn.heal()
		}
		faults[kind]++
	}
	ip.wait()
	fig.add(t, c.outcome(ctx, admin, brokerSet), faults, brokerEvents)
}

// chaosRedisRound runs lossSet and its conflicting copies once through a
// fresh deployment on a Sentinel-watched Redis pair, failing the master
// over again and again, and adds its figures to fig.
func chaosRedisRound(t *testing.T, r *rand.Rand, fig *chaosFigures) {
	d := deployWith(t, setup{later: true})
	ha := startRedisHA(t, d)
	d.startServices()
	ctx, cancel := context.WithTimeout(context.Background(), chaosRoundTimeout)
	defer cancel()
	admin := d.admin(ctx)
	copies, all := lossInput(t)
	paths, _ := splitFixture(t, lossSet.fixture(t), 10)
	var runs [][]string
	for _, p := range paths {
		runs = append(runs, []string{"--events", p})
	}
	runs = append(runs, []string{"--events", copies, "--end-of-stream"})
	ip := d.startIngestRuns(ctx, 300*time.Millisecond, runs...)
	faults := map[string]int{}
	for ctx.Err() == nil {
		time.Sleep(time.Duration(1000+r.IntN(2000)) * time.Millisecond)
		if ip.finished() {
			if n, known := pending(ctx, admin); known && n == 0 {
				break
			}
		}
		lag, took := ha.failover(ctx, time.Duration(500+r.IntN(2500))*time.Millisecond)
		t.Logf("failover: %d bytes of replication lost, promoted after %s", lag, took.Round(time.Millisecond))
		faults["redis-failover"]++
		ha.rejoin(ctx)
	}
	ip.wait()
	fig.add(t, d.outcome(ctx, admin, all), faults, lossSet.opts.Events)
}

// chaosElasticRound runs the broker input once through a fresh
// single-server deployment whose validators and windowers join, leave, die
// and stall at random, and adds its figures to fig.
func chaosElasticRound(t *testing.T, r *rand.Rand, fig *chaosFigures) {
	d := deployWith(t, setup{broker: true, aof: true, later: true})
	ctx, cancel := context.WithTimeout(context.Background(), chaosRoundTimeout)
	defer cancel()
	admin := d.admin(ctx)
	e := newElastic(t, ctx, d, admin)
	ip := d.startChunkedIngest(ctx, brokerSet.fixture(t), chaosChunks, chaosChunkGap)
	changes := map[string]int{}
	for ctx.Err() == nil {
		time.Sleep(time.Duration(500+r.IntN(1500)) * time.Millisecond) // the schedule's interval
		if ip.finished() {
			if n, known := pending(ctx, admin); known && n == 0 {
				break
			}
		}
		kind := elasticKinds[r.IntN(len(elasticKinds))]
		live := e.live(kind)
		what := []string{"join", "leave", "kill", "stall"}[r.IntN(4)]
		if what == "join" && len(live) >= 3 || what != "join" && len(live) < 2 {
			continue
		}
		m := live[r.IntN(len(live))]
		switch what {
		case "join":
			e.join(kind)
		case "leave", "kill":
			m.live = false
			e.steps = append(e.steps, step{what: what, kind: kind, member: m.id, at: time.Now()})
			map[string]func(*member){"leave": e.leave, "kill": e.kill}[what](m)
		case "stall":
			m.signal(syscall.SIGSTOP)
			e.steps = append(e.steps, step{what: what, kind: kind, member: m.id, at: time.Now()})
			time.Sleep(time.Duration(500+r.IntN(int(3*elasticTTL/time.Millisecond))) * time.Millisecond) // the stall is the fault
			e.resume(map[string]*member{kind: m})
		}
		changes[kind+" "+what]++
	}
	ip.wait()
	e.settle()
	fig.add(t, d.outcome(ctx, admin, brokerSet), changes, brokerEvents)
	w := e.measure()
	t.Logf("round %d: %s", fig.rounds, w)
	if w.max > elasticTTL+handOverBound {
		t.Errorf("a partition waited %s for an owner (%s), beyond lease-ttl %s + hand-over bound %s", w.max, w.maxAt, elasticTTL, handOverBound)
	}
}
