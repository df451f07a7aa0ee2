package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/frontdoor"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// ScenarioDoor: the front door (docs/spec.md §10), bin/ingest against a
// nats-server process, beside receiptctl ingest of the same records.
const ScenarioDoor = "door"

// Door sizes: producers of the throughput runs, records of a single-record
// run (each request waits for its own commit), and the producers of the
// memory run.
const (
	doorProducers     = 16
	doorSingleRecords = 16 * 1500
	doorRSSProducers  = 200
)

// DoorRunNames are the door scenario's producer runs: door and records
// per request.
var DoorRunNames = []string{"http-100", "nats-100", "http-1", "nats-1"}

// doorRun is one run of producers against the front door (or receiptctl
// ingest, Door "cli").
type doorRun struct {
	Name       string
	Door       string // http, nats, cli
	PerRequest int
	Producers  int
	Records    int
	Elapsed    time.Duration
	EPS        float64
	// CPU is the front door's CPU over the run: the ingest (or
	// receiptctl) process and nats-server's.
	CPU map[string]time.Duration
	// Ms are the requests' latencies, sorted.
	Ms []float64
	// PeakRSS is the ingest process's peak resident set (the memory run).
	PeakRSS int64
	// Rate is the paced rate (ev/s) of a half-load run, 0 unpaced.
	Rate float64
}

func (d *doorRun) cpuPerEvent() float64 {
	var total time.Duration
	for _, v := range d.CPU {
		total += v
	}
	return float64(total.Microseconds()) / float64(d.Records)
}

func (d *doorRun) p99() float64 {
	if len(d.Ms) == 0 {
		return 0
	}
	return d.Ms[min(len(d.Ms)-1, int(float64(len(d.Ms))*0.99))]
}

// doorResult is the door scenario's runs.
type doorResult struct {
	CLI  doorRun
	Runs []doorRun
	Half *doorRun
	RSS  *doorRun
	// Routing is nats-server alone routing single-record requests from
	// the same producers to a plain responder that stores nothing: the
	// part of a NATS door request any NATS service pays.
	Routing *doorRun
}

// run is the producer run of that name (DoorRunNames), nil if it did not
// run.
func (r *doorResult) run(name string) *doorRun {
	for i := range r.Runs {
		if r.Runs[i].Name == name {
			return &r.Runs[i]
		}
	}
	return nil
}

// runDoor measures the front door: receiptctl ingest of n records, then
// bin/ingest with 16 producers over HTTP and NATS, 100-record and
// single-record requests, a 100-record HTTP run at half its rate (p99),
// and 200 producers for the ingest process's peak memory. Each run sends
// its own copies of the records (event ids prefixed by the run), so none
// is a duplicate of another run's.
func (b *bencher) runDoor(ctx context.Context, ds *dataset) (*doorResult, error) {
	n := min(len(ds.part), 200_000)
	if b.o.Quick {
		n = min(n, 5_000)
	}
	lines, err := readLines(ds.path, n)
	if err != nil {
		return nil, err
	}
	ns, err := startNATSProcess(ctx, b.work)
	if err != nil {
		return nil, err
	}
	b.logf("nats-server process at %s (pprof at %s)", ns.url, ns.profiles)
	defer ns.stop()
	conn, err := connect.ConnectNATS(ns.url, "receiptbench-door")
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if err := stream.Ensure(ctx, conn.JS, wire.For(""), stream.Config{Partitions: b.o.Partitions}); err != nil {
		return nil, err
	}
	res := &doorResult{}

	// receiptctl ingest of the same records: the yardstick.
	file := filepath.Join(b.work, "door-cli.ndjson")
	if err := os.WriteFile(file, bytes.Join(prefixed(lines, "cli-"), []byte("\n")), 0o644); err != nil {
		return nil, err
	}
	before, _ := cpuTime(ns.pid())
	m, err := measure(ctx, io.Discard, b.o.Log, filepath.Join(b.o.BinDir, "receiptctl"), "ingest", "--nats-url", ns.url,
		"--events", file, "--partitions", strconv.Itoa(b.o.Partitions), "--source-id", "bench-cli")
	if err != nil {
		return nil, err
	}
	after, _ := cpuTime(ns.pid())
	res.CLI = doorRun{Name: "receiptctl-ingest", Door: "cli", Records: n, Elapsed: m.Wall, EPS: float64(n) / m.Wall.Seconds(),
		CPU: map[string]time.Duration{"receiptctl": m.User + m.System, "nats-server": after - before}}
	b.logf("door: receiptctl ingest %.0f ev/s, %.1f µs CPU per event", res.CLI.EPS, res.CLI.cpuPerEvent())

	single := min(n, doorSingleRecords)
	if res.Routing, err = routeOnly(ctx, ns, doorProducers, prefixed(lines[:single], "route-")); err != nil {
		return nil, err
	}
	b.logf("door: a single-record request routed to a plain responder costs %.1f µs of CPU (nats-server and the responder)", res.Routing.cpuPerEvent())

	door, err := startDoor(ctx, b.o.BinDir, b.work, ns.url, b.o.Partitions)
	if err != nil {
		return nil, err
	}
	for _, spec := range []struct {
		door string
		per  int
	}{{"http", 100}, {"nats", 100}, {"http", 1}, {"nats", 1}} {
		if !slices.Contains(b.o.DoorRuns, fmt.Sprintf("%s-%d", spec.door, spec.per)) {
			continue
		}
		recs := n
		if spec.per == 1 {
			recs = min(n, doorSingleRecords)
		}
		name := fmt.Sprintf("%s-%d", spec.door, spec.per)
		run, err := door.drive(ctx, ns, spec.door, spec.per, doorProducers, prefixed(lines[:recs], fmt.Sprintf("%s%d-", spec.door, spec.per)), 0)
		if err != nil {
			door.stop()
			return nil, fmt.Errorf("bench: door %s: %w", name, err)
		}
		run.Name = name
		res.Runs = append(res.Runs, *run)
		b.logf("door %s: %.0f ev/s, %.1f µs CPU per event, p99 %.1f ms", name, run.EPS, run.cpuPerEvent(), run.p99())
	}
	// Half of the 100-record HTTP rate (the p99 a producer sees) and the
	// memory run follow the 100-record HTTP run, when it ran.
	if len(res.Runs) == 0 || res.Runs[0].Name != "http-100" {
		door.stop()
		return res, nil
	}
	rate := res.Runs[0].EPS / 2
	half, err := door.drive(ctx, ns, "http", 100, doorProducers, prefixed(lines[:min(n, max(1000, int(rate*10)))], "half-"), rate)
	door.stop()
	if err != nil {
		return nil, fmt.Errorf("bench: door at half load: %w", err)
	}
	half.Name = "http-100-half-load"
	res.Half = half
	b.logf("door at half load (%.0f ev/s): p99 %.1f ms", rate, half.p99())

	// Memory: a fresh process under 200 producers.
	door, err = startDoor(ctx, b.o.BinDir, b.work, ns.url, b.o.Partitions)
	if err != nil {
		return nil, err
	}
	rss, err := door.drive(ctx, ns, "http", 100, doorRSSProducers, prefixed(lines, "rss-"), 0)
	if err == nil {
		rss.PeakRSS, err = peakRSS(door.cmd.Process.Pid)
	}
	door.stop()
	if err != nil {
		return nil, fmt.Errorf("bench: door under %d producers: %w", doorRSSProducers, err)
	}
	rss.Name = fmt.Sprintf("http-100-%d-producers", doorRSSProducers)
	res.RSS = rss
	b.logf("door under %d producers: peak RSS %d MB", doorRSSProducers, rss.PeakRSS>>20)
	return res, nil
}

// routeOnly sends recs one per request from producers connections, in the
// NATS door's form, to a plain responder process (startResponder) that
// answers each with the status header and a fixed body, and measures the
// CPU of nats-server and of the responder.
func routeOnly(ctx context.Context, ns *natsProcess, producers int, recs [][]byte) (*doorRun, error) {
	rp, err := startResponder(ctx, ns.url)
	if err != nil {
		return nil, err
	}
	defer rp.stop()
	conns := make([]*nats.Conn, producers)
	for p := range conns {
		if conns[p], err = nats.Connect(ns.url); err != nil {
			return nil, err
		}
		defer conns[p].Close()
	}
	meter := cpuMeter(map[string]int{"nats-server": ns.pid(), "responder": rp.pid()})
	cpu0 := meter.read()
	began := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	share := (len(recs) + producers - 1) / producers
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, rec := range recs[min(p*share, len(recs)):min((p+1)*share, len(recs))] {
				m := nats.NewMsg(routeSubject)
				m.Data = rec
				m.Header.Set("Content-Type", frontdoor.TypeNDJSON)
				if _, err := conns[p].RequestMsgWithContext(ctx, m); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, fmt.Errorf("bench: routing floor: %w", err)
	}
	elapsed := time.Since(began)
	return &doorRun{Name: "nats-route-only", Door: "nats", PerRequest: 1, Producers: producers, Records: len(recs), Elapsed: elapsed,
		EPS: float64(len(recs)) / elapsed.Seconds(), CPU: meter.since(cpu0)}, nil
}

// readLines reads the first n non-blank lines of path.
func readLines(path string, n int) ([][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out [][]byte
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() && len(out) < n {
		if l := bytes.TrimSpace(sc.Bytes()); len(l) > 0 {
			out = append(out, bytes.Clone(l))
		}
	}
	return out, sc.Err()
}

// prefixed copies lines with every event id prefixed by p.
func prefixed(lines [][]byte, p string) [][]byte {
	out := make([][]byte, len(lines))
	for i, l := range lines {
		out[i] = bytes.Replace(l, []byte(`"event_id":"`), []byte(`"event_id":"`+p), 1)
	}
	return out
}

// natsProcess is a nats-server child process with JetStream on a file
// store: the front door's CPU is measured apart from the producers'.
type natsProcess struct {
	cmd *exec.Cmd
	url string
	dir string
	// profiles is the server's pprof address (http://…/debug/pprof/),
	// on a free loopback port: go tool pprof reads a profile of the
	// server from it while a scenario runs.
	profiles string
	// monitor is the server's monitoring address (http://…:port), for
	// /jsz: the JetStream API requests it has answered.
	monitor string
}

// jsAPIRequests is how many JetStream API requests the server has
// answered (/jsz's api.total).
func (s *natsProcess) jsAPIRequests(ctx context.Context) (uint64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.monitor+"/jsz", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var jsz struct {
		API struct {
			Total uint64 `json:"total"`
		} `json:"api"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&jsz); err != nil {
		return 0, fmt.Errorf("bench: /jsz: %w", err)
	}
	return jsz.API.Total, nil
}

func (s *natsProcess) pid() int { return s.cmd.Process.Pid }

func (s *natsProcess) stop() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	_ = os.RemoveAll(s.dir)
}

// natsServerBin builds nats-server (the module's version) into the work
// directory once and returns its path.
func natsServerBin(ctx context.Context, work string) (string, error) {
	bin := filepath.Join(work, "nats-server")
	if _, err := os.Stat(bin); err != nil {
		if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/nats-io/nats-server/v2").CombinedOutput(); err != nil {
			return "", fmt.Errorf("bench: go build nats-server: %w\n%s", err, out)
		}
	}
	return bin, nil
}

// startNATSProcess builds nats-server (once, into the work directory) and
// starts it on a free loopback port.
func startNATSProcess(ctx context.Context, work string) (*natsProcess, error) {
	bin, err := natsServerBin(ctx, work)
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	profPort, err := freePort()
	if err != nil {
		return nil, err
	}
	monPort, err := freePort()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(work, "door-nats")
	_ = os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, "listen: 127.0.0.1:%d\nprof_port: %d\nhttp: 127.0.0.1:%d\njetstream { store_dir: %q }\n", port, profPort, monPort, filepath.Join(dir, "store")), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "-c", conf)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &natsProcess{cmd: cmd, url: fmt.Sprintf("nats://127.0.0.1:%d", port), dir: dir,
		profiles: fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/", profPort), monitor: fmt.Sprintf("http://127.0.0.1:%d", monPort)}
	err = connect.WaitFor(ctx, func(context.Context) error {
		nc, err := nats.Connect(s.url)
		if err == nil {
			nc.Close()
		}
		return err
	}, nil)
	if err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// doorProcess is a bin/ingest child process.
type doorProcess struct {
	cmd  *exec.Cmd
	url  string // the HTTP door
	http *http.Client
}

// startDoor starts bin/ingest against natsURL; its log goes to
// work/ingest.log.
func startDoor(ctx context.Context, binDir, work, natsURL string, partitions int) (*doorProcess, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	listen := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command(filepath.Join(binDir, "ingest"), "--nats-url", natsURL, "--listen", listen, "--http-addr", "127.0.0.1:0",
		"--partitions", strconv.Itoa(partitions), "--source-id", "bench-door", "--max-inflight-events", "100000")
	logFile, err := os.OpenFile(filepath.Join(work, "ingest.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child holds its own descriptor
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	d := &doorProcess{cmd: cmd, url: "http://" + listen + frontdoor.Path,
		http: &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: doorRSSProducers}}}
	err = connect.WaitFor(ctx, func(context.Context) error {
		resp, err := d.http.Get(d.url)
		if err != nil {
			return fmt.Errorf("%w: %v", connect.ErrNotYet, err)
		}
		resp.Body.Close()
		return nil
	}, nil)
	if err != nil {
		d.stop()
		return nil, err
	}
	return d, nil
}

// stop ends the process with SIGTERM (it drains and leaves as a source).
func (d *doorProcess) stop() {
	_ = d.cmd.Process.Signal(os.Interrupt)
	_ = d.cmd.Wait()
}

// drive sends recs through door ("http" or "nats") in requests of per
// records from producers concurrent producers, each its own contiguous
// share in order, paced to rate ev/s over all of them when rate > 0, and
// measures it.
func (d *doorProcess) drive(ctx context.Context, ns *natsProcess, door string, per, producers int, recs [][]byte, rate float64) (*doorRun, error) {
	var conns []*nats.Conn
	if door == "nats" {
		for range producers {
			nc, err := nats.Connect(ns.url)
			if err != nil {
				return nil, err
			}
			defer nc.Close()
			conns = append(conns, nc)
		}
	}
	var reqs [][][]byte // per producer, its request bodies
	share := (len(recs) + producers - 1) / producers
	for p := range producers {
		part := recs[min(p*share, len(recs)):min((p+1)*share, len(recs))]
		var bodies [][]byte
		for i := 0; i < len(part); i += per {
			bodies = append(bodies, append(bytes.Join(part[i:min(i+per, len(part))], []byte("\n")), '\n'))
		}
		reqs = append(reqs, bodies)
	}
	pids := map[string]int{"ingest": d.cmd.Process.Pid, "nats-server": ns.pid()}
	meter := cpuMeter(pids)
	cpu0 := meter.read()
	began := time.Now()
	var mu sync.Mutex
	var ms []float64
	var firstErr error
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var gap time.Duration
			if rate > 0 {
				gap = time.Duration(float64(time.Second) * float64(per*producers) / rate)
			}
			// Paced producers start spread over one gap, as independent
			// producers are, not all at the same instant.
			next := began.Add(gap * time.Duration(p) / time.Duration(producers))
			for _, body := range reqs[p] {
				if gap > 0 {
					time.Sleep(time.Until(next))
					next = next.Add(gap)
				}
				t0 := time.Now()
				err := d.send(ctx, door, conns, p, body)
				took := float64(time.Since(t0).Microseconds()) / 1000
				mu.Lock()
				ms = append(ms, took)
				if err != nil && firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	elapsed := time.Since(began)
	slices.Sort(ms)
	return &doorRun{Door: door, PerRequest: per, Producers: producers, Records: len(recs), Elapsed: elapsed,
		EPS: float64(len(recs)) / elapsed.Seconds(), CPU: meter.since(cpu0), Ms: ms, Rate: rate}, nil
}

// send sends one body and requires every record stored.
func (d *doorProcess) send(ctx context.Context, door string, conns []*nats.Conn, p int, body []byte) error {
	var code int
	var answer []byte
	if door == "nats" {
		m := nats.NewMsg(frontdoor.Subject)
		m.Data = body
		m.Header.Set("Content-Type", frontdoor.TypeNDJSON)
		r, err := conns[p].RequestMsgWithContext(ctx, m)
		if err != nil {
			return err
		}
		code, _ = strconv.Atoi(r.Header.Get(frontdoor.HdrStatus))
		answer = r.Data
	} else {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.url, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", frontdoor.TypeNDJSON)
		resp, err := d.http.Do(req)
		if err != nil {
			return err
		}
		answer, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		code = resp.StatusCode
	}
	if code != http.StatusOK {
		return errors.New("answered " + strconv.Itoa(code) + ": " + string(answer))
	}
	return nil
}
