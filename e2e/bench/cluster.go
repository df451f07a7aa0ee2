package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ScenarioCluster: B0 and E2E on a 3-node cluster of nats-server
// processes, every stream and bucket with three replicas: the shape a
// production deployment runs (docs/deployment.md).
const ScenarioCluster = "cluster"

// clusterNodes is the size of the cluster scenario's cluster.
const clusterNodes = 3

// natsTarget is the JetStream a run uses: the embedded server in the
// bench process, or nats-server processes in a cluster.
type natsTarget struct {
	url      string
	replicas int
	// pids are the server processes, metered beside the bench process
	// (none for the embedded server, which runs in the bench process).
	pids map[string]int
	stop func()
}

// startTarget starts the JetStream of a run in dir: the embedded server
// when nodes ≤ 1, else a cluster of nodes nats-server processes.
func (b *bencher) startTarget(ctx context.Context, dir string, syncAlways bool, nodes int) (*natsTarget, error) {
	if nodes <= 1 {
		ns, url, err := startNATS(dir, syncAlways)
		if err != nil {
			return nil, err
		}
		return &natsTarget{url: url, replicas: 1, stop: func() { stopNATS(ns, dir) }}, nil
	}
	return startCluster(ctx, b.work, dir, nodes)
}

// startCluster starts nodes nats-server processes on free loopback ports,
// routed to each other, with their stores under dir, and waits until
// JetStream answers through the first (a meta leader is elected). The
// URL names every node.
func startCluster(ctx context.Context, work, dir string, nodes int) (*natsTarget, error) {
	bin, err := natsServerBin(ctx, work)
	if err != nil {
		return nil, err
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	ports := make([]int, 2*nodes)
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			return nil, err
		}
	}
	var routes, urls []string
	for i := 0; i < nodes; i++ {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[nodes+i]))
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", ports[i]))
	}
	t := &natsTarget{url: strings.Join(urls, ","), replicas: nodes, pids: map[string]int{}}
	var cmds []*exec.Cmd
	t.stop = func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
		_ = os.RemoveAll(dir)
	}
	for i := 0; i < nodes; i++ {
		nd := filepath.Join(dir, "n"+strconv.Itoa(i+1))
		if err := os.MkdirAll(nd, 0o755); err != nil {
			t.stop()
			return nil, err
		}
		conf := fmt.Sprintf("server_name: n%d\nlisten: 127.0.0.1:%d\njetstream { store_dir: %q }\n"+
			"cluster { name: bench, listen: 127.0.0.1:%d, routes: [%s] }\n",
			i+1, ports[i], filepath.Join(nd, "store"), ports[nodes+i], strings.Join(routes, ", "))
		path := filepath.Join(nd, "nats.conf")
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			t.stop()
			return nil, err
		}
		cmd := exec.Command(bin, "-c", path)
		cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.stop()
			return nil, fmt.Errorf("bench: start nats-server n%d: %w", i+1, err)
		}
		cmds = append(cmds, cmd)
		t.pids["nats-server-"+strconv.Itoa(i+1)] = cmd.Process.Pid
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		err := jetStreamReady(wctx, urls[0])
		if err == nil {
			return t, nil
		}
		select {
		case <-wctx.Done():
			t.stop()
			return nil, fmt.Errorf("bench: the %d-node cluster's JetStream did not answer: %w", nodes, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// jetStreamReady asks the account's JetStream info through url.
func jetStreamReady(ctx context.Context, url string) error {
	nc, err := nats.Connect(url, nats.Timeout(time.Second))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = js.AccountInfo(actx)
	return err
}

// clusterResult is B0 and E2E on the cluster.
type clusterResult struct {
	Nodes int
	B0    b0Result
	E2E   *e2eResult
}

// runCluster runs B0 (publish and consume) and one E2E run of ds on a
// cluster of clusterNodes nats-server processes, R3 streams: the CPU per
// event of every process (the three servers, the services, redis-server
// and the bench's ingest) beside raw JetStream's on the same cluster.
func (b *bencher) runCluster(ctx context.Context, ds *dataset, profile func(string), endProfile func()) (*clusterResult, error) {
	res := &clusterResult{Nodes: clusterNodes}
	b.logf("cluster: B0 on %d nats-server processes, R%d", clusterNodes, clusterNodes)
	b0, err := b.runB0(ctx, ds, b0Spec{nodes: clusterNodes})
	if err != nil {
		return nil, err
	}
	res.B0 = b0
	b.logf("cluster: B0 publish %.0f ev/s, consume %.0f ev/s", b0.PublishEPS, b0.ConsumeEPS)
	b.logf("cluster: E2E of %d records, 1 windower", len(ds.part))
	profile(ScenarioCluster)
	e, err := b.runE2E(ctx, e2eSpec{name: "cluster", ds: ds, windowers: 1, nodes: clusterNodes})
	endProfile()
	if err != nil {
		return nil, err
	}
	res.E2E = e
	b.logf("cluster: E2E %.0f ev/s in %s", e.EPS, e.Elapsed.Round(time.Millisecond))
	return res, nil
}

// b0CPU and e2eCPU are the runs' CPU per event over every process, in µs.
func (c *clusterResult) b0CPU() float64 {
	return float64((c.B0.PublishCPU + c.B0.ConsumeCPU).Microseconds()) / float64(max(c.B0.Records, 1))
}

func (c *clusterResult) e2eCPU() float64 {
	return float64(sumCPU(c.E2E.CPU).Microseconds()) / float64(max(c.E2E.Records, 1))
}

// printCluster writes the cluster rows.
func (r *Results) printCluster(row func(label, value, note string), skipped func(...string)) {
	labels := []string{"Cluster B0 CPU/event", "Cluster E2E", "Cluster E2E CPU/event"}
	switch {
	case r.ClusterNA:
		for _, l := range labels {
			row(l, "n/a", "needs nats-server and the services as processes (--mode process)")
		}
		return
	case r.Cluster == nil:
		skipped(labels...)
		return
	}
	c := r.Cluster
	b0 := c.b0CPU()
	row("Cluster B0 CPU/event", fmt.Sprintf("%.1f µs", b0), fmt.Sprintf("%d nats-server processes, R%d streams: publish %s (%s), consume %s (%s), every server's CPU and the bench's",
		c.Nodes, c.Nodes, eps(c.B0.PublishEPS), us(c.B0.PublishCPU, c.B0.Records), eps(c.B0.ConsumeEPS), us(c.B0.ConsumeCPU, c.B0.Records)))
	e := c.E2E
	row("Cluster E2E", eps(e.EPS), fmt.Sprintf("%.3f of the cluster's B0 publish; %s", e.EPS/c.B0.PublishEPS, dur(e.Elapsed)))
	var parts []string
	for _, k := range slices.Sorted(mapsKeys(e.CPU)) {
		parts = append(parts, k+" "+us(e.CPU[k], e.Records))
	}
	per := c.e2eCPU()
	row("Cluster E2E CPU/event", fmt.Sprintf("%.1f µs", per), fmt.Sprintf("%.2f× the cluster's B0; %s", per/b0, strings.Join(parts, ", ")))
}
