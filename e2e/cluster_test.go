package e2e

// Scale-out on loopback (issue 6, point 6).
//
//   - TestClusterNATSNodeLossKeepsWindows: three nats-servers from
//     deploy/nats/nats.conf form a cluster, the streams and buckets are
//     created at R3 by the set-up job, the services run as their own users
//     with two windower instances splitting the partitions, the input is
//     ingested while they run, and the leader of VALID is shut down while
//     the validator is writing it (and the windowers and the publisher
//     reading it). The run drains on the two remaining nodes, every window
//     equals the clean embedded run, and each partition of VALID is in RAW
//     order (the validator's atomic batches: docs/deployment.md).
//   - TestClusterRedisScriptsStayInOneSlot: a real three-master Redis
//     Cluster (redis-server --cluster-enabled yes, joined with redis-cli
//     --cluster create). Every ledger script runs through
//     redis.ClusterClient against partitions spread over all masters, each
//     script's keys hash to one slot (Redis Cluster refuses a script with
//     keys in two slots: CROSSSLOT), and the whole pipeline, its services
//     started with --redis-cluster, ends with the clean run's windows.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/receiptflow/receiptflow/pkg/ledger"
	"github.com/receiptflow/receiptflow/pkg/pipeline"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// clusterNATS starts three nodes of deploy/nats/nats.conf routed to each
// other on loopback and waits for the JetStream meta leader. It returns the
// servers and the comma-separated client URL list.
func clusterNATS(t testing.TB) ([]*server.Server, string) {
	t.Helper()
	c := testenv.NewCluster(t, "receiptflow", 3, func(i int, o *server.Options) {
		*o = *secNATSOptions(t, fmt.Sprintf("rf-n%d", i+1), o.StoreDir, -1, nil)
	})
	servers := make([]*server.Server, c.Len())
	for i := range servers {
		servers[i] = c.Server(i)
	}
	return servers, c.URLs()
}

func TestClusterNATSNodeLossKeepsWindows(t *testing.T) {
	began := time.Now()
	phase := func(what string) { t.Logf("%6.1fs %s", time.Since(began).Seconds(), what) }
	events := secGenerate(t, 4000, 11)
	clean := secCleanRun(t, events)
	phase("clean run done")

	rs := secRedisServer(t)
	servers, urls := clusterNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	phase("cluster up")
	secSetup(t, ctx, urls, 3)
	phase("streams and buckets created at R3")
	admin := secConnect(t, urls, "admin")
	for _, name := range []string{wire.Raw, wire.Valid, wire.Rejected, wire.Late, wire.Changes, "KV_receipts-1", "KV_receipts"} {
		st, err := admin.JS.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if r := st.CachedInfo().Config.Replicas; r != 3 {
			t.Fatalf("%s has %d replicas, want 3", name, r)
		}
	}

	// The services start on empty streams and the input is ingested while
	// they run, so the validator publishes VALID in many small batches.
	// The leader of VALID is shut down once part of VALID is written: the
	// node loss hits the validator while it publishes (and the windowers
	// and the publisher while they read). The validator writes VALID in
	// atomic batches (stream.Committer), so each partition of VALID
	// stays in RAW order through the lost publishes and their retries.
	// A publish lost with the node fails after 5s (--publish-ack-timeout)
	// instead of 15s.
	ackTimeout := "--publish-ack-timeout=5s"

	svcCtx, stopServices := secServiceContext()
	defer stopServices()
	procs := []*secProc{
		secStartService(t, svcCtx, "validator", "validator", secServiceArgs("validator", urls, rs.url(), "--instance", "0", "--instances", "1", ackTimeout)),
		secStartService(t, svcCtx, "windower-0", "windower", secServiceArgs("windower", urls, rs.url(), "--instance", "0", "--instances", "2", ackTimeout)),
		secStartService(t, svcCtx, "windower-1", "windower", secServiceArgs("windower", urls, rs.url(), "--instance", "1", "--instances", "2", ackTimeout)),
		secStartService(t, svcCtx, "publisher", "publisher", secServiceArgs("publisher", urls, rs.url(), ackTimeout)),
	}
	secCheckFor(t, 60*time.Second, func() error {
		if !strings.Contains(procs[0].log.String(), "validator partition started") {
			return fmt.Errorf("no validator partition running yet")
		}
		for _, p := range procs[1:3] {
			if strings.Contains(p.log.String(), "windower partition started") {
				return nil
			}
		}
		return fmt.Errorf("no windower partition running yet")
	})
	phase("services running")

	// The killer watches VALID and shuts its leader down once it holds
	// lossAt messages (or once the input is all in, whichever is first).
	const lossAt = 800
	type loss struct {
		victim     *server.Server
		valid, raw uint64
		err        error
	}
	ingested := make(chan struct{})
	lost := make(chan loss, 1)
	go func() {
		var l loss
		defer func() { lost <- l }()
		for {
			valid, err := admin.JS.Stream(ctx, wire.Valid)
			if err != nil {
				l.err = err
				return
			}
			info, err := valid.Info(ctx)
			if err != nil {
				l.err = err
				return
			}
			done := false
			select {
			case <-ingested:
				done = true
			default:
			}
			if info.State.Msgs >= lossAt || done {
				l.valid = info.State.Msgs
				for _, s := range servers {
					if info.Cluster != nil && s.Name() == info.Cluster.Leader {
						l.victim = s
					}
				}
				if l.victim == nil {
					l.err = fmt.Errorf("VALID has no leader: %+v", info.Cluster)
					return
				}
				if raw, err := admin.JS.Stream(ctx, wire.Raw); err == nil {
					if ri, err := raw.Info(ctx); err == nil {
						l.raw = ri.State.Msgs
					}
				}
				l.victim.Shutdown()
				l.victim.WaitForShutdown()
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	ingestConn := secConnect(t, urls, "ingest")
	st := secIngest(t, ctx, ingestConn.JS, events)
	close(ingested)
	phase("ingested")
	l := <-lost
	if l.err != nil {
		t.Fatal(l.err)
	}
	victim := l.victim
	phase("lost " + victim.Name())
	t.Logf("shut down %s, the leader of VALID, with %d messages in VALID and %d in RAW (%d records ingested in all)",
		victim.Name(), l.valid, l.raw, st.Records)

	if err := secDrained(ctx, admin.JS, 8+8+1, 60*time.Second); err != nil {
		buf := make([]byte, 8<<20)
		n := runtime.Stack(buf, true)
		path := filepath.Join(os.TempDir(), "receiptflow-cluster-stacks.txt")
		os.WriteFile(path, buf[:n], 0o644)
		t.Fatalf("%v (goroutine stacks in %s)", err, path)
	}
	phase("drained on two nodes")
	got, err := pipeline.ReadWindows(ctx, admin.JS, wire.For(""))
	if err != nil {
		t.Fatal(err)
	}
	if breaks := clusterOrderReport(t, ctx, admin.JS); breaks > 0 {
		t.Errorf("VALID is out of RAW order in %d places", breaks)
	}
	secSameWindows(t, got, clean)
	for _, p := range procs {
		if strings.Contains(p.log.String(), "nats refused an operation") {
			t.Errorf("%s was refused by NATS:\n%s", p.name, p.log.String())
		}
		t.Logf("%s: %d runs, exits %v", p.name, p.runs.Load(), p.exitErrors())
	}
	t.Logf("%d windows equal to the clean run after losing %s", len(got), victim.Name())
}

func TestClusterRedisScriptsStayInOneSlot(t *testing.T) {
	rc := testenv.NewRedisCluster(t, 3)
	rdb := rc.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	keys := ledger.Keys{Prefix: "rf:1:"}
	// Today's ingest day: the claims of a past day expire as they are written.
	today := time.Now().Unix() / 86400

	// Each partition's keys share one slot, and the partitions spread over
	// every master.
	const partitions = 16
	h10 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC).UnixMilli()
	ids := []string{window.ID(h10), window.ID(h10 + window.WidthMs), window.ID(h10 + 2*window.WidthMs)}
	masters := map[string]bool{}
	for p := 0; p < partitions; p++ {
		names := []string{keys.Checkpoint(p), keys.Index(p)}
		for _, id := range ids {
			names = append(names, keys.Partial(p, id), keys.LedgerShard(p, id, 0), keys.LedgerShard(p, id, ledger.LedgerShards-1))
		}
		slot := clusterSlot(t, ctx, rdb, names[0])
		for _, k := range names[1:] {
			if s := clusterSlot(t, ctx, rdb, k); s != slot {
				t.Fatalf("partition %d: %s in slot %d, %s in slot %d", p, names[0], slot, k, s)
			}
		}
		c, err := rdb.MasterForKey(ctx, names[0])
		if err != nil {
			t.Fatal(err)
		}
		masters[c.Options().Addr] = true
	}
	if len(masters) != 3 {
		t.Fatalf("the partitions live on %d masters, want all 3", len(masters))
	}
	for _, id := range []string{"e1", "x", "{p0}"} {
		a, b := keys.Claims(id, today), keys.Claims(id, today-1)
		if clusterSlot(t, ctx, rdb, a) != clusterSlot(t, ctx, rdb, b) {
			t.Fatalf("the claims of %s on two days are in two slots: %s, %s", id, a, b)
		}
	}

	// Every script, on every partition, through the ClusterClient.
	store := ledger.NewStore(rdb, ledger.Config{Keys: keys, Lateness: 5 * time.Minute, Grace: time.Hour, Horizon: time.Hour})
	minute := int64(60_000)
	for p := 0; p < partitions; p++ {
		recs := []ledger.Record{
			{Seq: 1, Kind: ledger.Submission, EventID: fmt.Sprintf("a-%d", p), Time: h10 + 10*minute},
			{Seq: 2, Kind: ledger.Submission, EventID: fmt.Sprintf("b-%d", p), Time: h10 + 70*minute},
			{Seq: 3, Kind: ledger.Other, EventID: fmt.Sprintf("o-%d", p), Time: h10 + 130*minute},
			{Seq: 4, Kind: ledger.Heartbeat, Time: h10 + 300*minute},
			{Seq: 5, Kind: ledger.Submission, EventID: fmt.Sprintf("c-%d", p), Time: h10 + 20*minute},
		}
		res, err := store.Apply(ctx, p, recs, 0, 0)
		if err != nil {
			t.Fatalf("apply.lua on partition %d: %v", p, err)
		}
		again, err := store.Apply(ctx, p, recs, res.Seq, 0)
		if err != nil {
			t.Fatalf("apply.lua again on partition %d: %v", p, err)
		}
		for i, d := range again.Decisions {
			if d.Code != ledger.Replayed && d.Code != ledger.LateAgain {
				t.Fatalf("partition %d: replayed record %d decided %s", p, i, d.Code)
			}
		}
		view, err := store.Read(ctx, p, ids)
		if err != nil {
			t.Fatalf("read.lua on partition %d: %v", p, err)
		}
		if view.Partials[ids[0]].Count != 1 || view.Partials[ids[1]].Count != 1 {
			t.Fatalf("partition %d partials %+v", p, view.Partials)
		}
		if _, err := store.Retire(ctx, p, h10+window.WidthMs, []string{ids[0]}); err != nil {
			t.Fatalf("retire.lua on partition %d: %v", p, err)
		}
	}
	if _, err := store.GlobalWatermark(ctx, partitions); err != nil {
		t.Fatalf("watermarks across slots: %v", err)
	}
	var claims []ledger.Claim
	for i := 0; i < 200; i++ {
		claims = append(claims, ledger.Claim{EventID: fmt.Sprintf("ev-%d", i), Fingerprint: uint64(i), Day: today})
	}
	if _, err := store.Claims(ctx, claims); err != nil {
		t.Fatalf("claims.lua across slots: %v", err)
	}
	claims[7].Fingerprint = 999
	conflicts, err := store.Claims(ctx, claims)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range conflicts {
		if c != (i == 7) {
			t.Fatalf("claim %d conflict = %v", i, c)
		}
	}
	// The first call sets the retired-day marker, the second deletes a
	// day's buckets on every master.
	if err := store.RetireClaims(ctx, today+5); err != nil {
		t.Fatalf("retiring claims across slots: %v", err)
	}
	if err := store.RetireClaims(ctx, today+6); err != nil {
		t.Fatalf("retiring claims across slots: %v", err)
	}

	// The whole pipeline on the Redis Cluster.
	t.Run("pipeline", func(t *testing.T) {
		if err := rdb.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return c.FlushAll(ctx).Err() }); err != nil {
			t.Fatal(err)
		}
		events := secGenerate(t, 3000, 5)
		clean := secCleanRun(t, events)
		_, natsURL := secNATS(t)
		secSetup(t, ctx, natsURL, 1)
		redisURL := strings.Join(rc.Addrs(), ",")
		args := func(user string, extra ...string) []string {
			return append([]string{
				"--nats-url", natsURL, "--nats-user", user, "--nats-password-file", secPasswordFile("nats", user),
				"--redis-url", redisURL, "--redis-cluster",
				"--ensure-streams=false", "--partitions", "8", "--replay-horizon", secHorizon.String(),
				"--http-addr", "127.0.0.1:0", "--stats-interval", "200ms",
			}, extra...)
		}
		svcCtx, stop := secServiceContext()
		defer stop()
		procs := []*secProc{
			secStartService(t, svcCtx, "validator", "validator", args("validator", "--instance", "0", "--instances", "1")),
			secStartService(t, svcCtx, "windower-0", "windower", args("windower", "--instance", "0", "--instances", "2")),
			secStartService(t, svcCtx, "windower-1", "windower", args("windower", "--instance", "1", "--instances", "2")),
			secStartService(t, svcCtx, "publisher", "publisher", args("publisher")),
		}
		ingestConn := secConnect(t, natsURL, "ingest")
		secIngest(t, ctx, ingestConn.JS, events)
		admin := secConnect(t, natsURL, "admin")
		secWaitDrained(t, ctx, admin.JS, 8+8+1, 60*time.Second)
		got, err := pipeline.ReadWindows(ctx, admin.JS, wire.For(""))
		if err != nil {
			t.Fatal(err)
		}
		secSameWindows(t, got, clean)
		stop()
		for _, p := range procs {
			<-p.done
			for _, e := range p.exitErrors() {
				if strings.Contains(e, "CROSSSLOT") || strings.Contains(e, "MOVED") {
					t.Errorf("%s: %s", p.name, e)
				}
			}
			t.Logf("%s: %d runs, exits %v", p.name, p.runs.Load(), p.exitErrors())
		}
		t.Logf("%d windows on the Redis Cluster equal to the clean run", len(got))
	})
}

func clusterSlot(t testing.TB, ctx context.Context, rdb *redis.ClusterClient, key string) int64 {
	t.Helper()
	s, err := rdb.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// clusterOrderReport logs, for each VALID partition, where the RAW order
// of its records breaks (a message from an earlier RAW sequence stored
// after a later one), and returns how many breaks there are.
func clusterOrderReport(t testing.TB, ctx context.Context, js jetstream.JetStream) int {
	t.Helper()
	last := map[string]uint64{}
	breaks := map[string]int{}
	err := stream.ReadValid(ctx, js, wire.Valid, func(v stream.ValidRecord) error {
		if v.RawSeq < last[v.Subject] {
			if breaks[v.Subject] < 3 {
				t.Logf("%s: VALID seq %d holds RAW seq %d after RAW seq %d (kind %c)", v.Subject, v.Seq, v.RawSeq, last[v.Subject], v.Kind)
			}
			breaks[v.Subject]++
		}
		last[v.Subject] = max(last[v.Subject], v.RawSeq)
		return nil
	})
	t.Logf("VALID order breaks by subject: %v (read error: %v)", breaks, err)
	if err != nil {
		t.Errorf("reading VALID: %v", err)
	}
	total := 0
	for _, n := range breaks {
		total += n
	}
	return total
}
