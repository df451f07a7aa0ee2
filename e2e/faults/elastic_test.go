package faults

// Elastic membership (issue 27, docs/spec.md §9): validators and windowers
// run in group mode (no --instance/--instances, leases of elasticTTL)
// while the input is ingested in chunks, and their membership changes
// step by step, both kinds at once: two joins, a SIGTERM leave (hand-over),
// a SIGSTOP stall past the lease and SIGCONT, a SIGKILL without restart,
// and a join again. After each step the group settles (every partition
// held, none by more than ceil(P/n) of a member, each member's /readyz
// naming what it holds). Every final window must equal the clean run's
// and parity must hold.
//
// The lease bucket's stream is recorded as it is written (a release purges
// a key's history, so it cannot be read afterwards). From it each step's
// unowned waits are measured: for a leave, kill or stall, from the signal
// to the successor's lease on each partition the victim held; for a join,
// from the release of each partition the joiner takes to its lease. No
// wait may exceed elasticTTL + handOverBound; the line
//
//	elastic <shape>: … max unowned wait X s (<step>), lease-ttl Y s, hand-over Z s, …
//
// gives the figures (docs/recovery.md).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/ledger"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

const (
	// elasticTTL is the members' --lease-ttl: short, to keep the test
	// short (the default is 10 s).
	elasticTTL = 2 * time.Second
	// handOverBound is how long beyond the lease TTL a partition may wait
	// for its next owner: the TTL expiry's marker, the watchers, the
	// create of the new lease, and for a leave or a join the old owner's
	// drain of its batch in flight. A liveness bound of docs/spec.md §9,
	// generous for a loaded 2-core machine, not a speed check.
	handOverBound = elasticTTL + 5*time.Second
	// elasticChunks is how many receiptctl ingest runs publish the input;
	// each step starts one and hits while it publishes, a stall more
	// while it waits for its successors.
	elasticChunks = 12
	// settleTimeout bounds the wait for a group to settle after a step.
	settleTimeout = 60 * time.Second
)

var elasticKinds = []string{"validator", "windower"}

func TestElasticMembership(t *testing.T) {
	t.Parallel()
	brokerSet.cleanRun(t)
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	d := deployWith(t, setup{broker: true, aof: true, later: true})
	admin := d.admin(ctx)
	elasticRun(t, ctx, began, d, admin, "single-server")
}

func TestClusterElasticMembership(t *testing.T) {
	t.Parallel()
	brokerSet.cleanRun(t)
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	c := deployCluster(t, ctx)
	admin := c.clusterAdmin(ctx)
	elasticRun(t, ctx, began, c.deployment, admin, "cluster")
}

// member is one validator or windower process in group mode.
type member struct {
	*proc
	kind string
	id   string // its member id in the group
	live bool
}

// elastic is one run of the membership schedule.
type elastic struct {
	t       *testing.T
	d       *deployment
	admin   *connect.Conn
	leases  *leaseLog
	rdb     *redis.Client
	keys    ledger.Keys
	members []*member
	steps   []step
	fenced  map[string]float64 // fenced_writes_total of each stalled kind
	paths   []string
	counts  []int
	next    int // the next chunk to ingest
	during  int // steps that hit while ingest published
}

// step is one change of membership of one kind.
type step struct {
	what, kind, member string
	at                 time.Time
	resumed            time.Time // a stall's SIGCONT
}

// resume continues the stalled members (SIGCONT) and notes when.
func (e *elastic) resume(victims map[string]*member) {
	for _, m := range victims {
		m.signal(syscall.SIGCONT)
	}
	now := time.Now()
	for i := range e.steps {
		s := &e.steps[i]
		if s.what == "stall" && s.resumed.IsZero() && victims[s.kind] != nil && victims[s.kind].id == s.member {
			s.resumed = now
		}
	}
}

// newElastic starts recording the lease bucket, the publisher (static)
// and one member of each kind, and waits until they hold every partition.
func newElastic(t *testing.T, ctx context.Context, d *deployment, admin *connect.Conn) *elastic {
	t.Helper()
	e := &elastic{t: t, d: d, admin: admin, fenced: map[string]float64{}, keys: ledger.Keys{Prefix: wire.For("").RedisPrefix()}}
	e.leases = recordLeases(t, ctx, admin.JS)
	e.rdb = redis.NewClient(&redis.Options{Addr: strings.TrimPrefix(d.redis.URL(), "redis://")})
	t.Cleanup(func() { e.rdb.Close() })
	d.procs = append(d.procs, startProc(t, binaries(t), "publisher", d.env, "--http-addr", fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))))
	for _, k := range elasticKinds {
		e.join(k)
	}
	e.settle()
	return e
}

// elasticRun runs the schedule on a deployment made at began (after the
// shared clean run) and prints its line.
func elasticRun(t *testing.T, ctx context.Context, began time.Time, d *deployment, admin *connect.Conn, shape string) {
	e := newElastic(t, ctx, d, admin)
	t.Logf("the groups settled at %s", time.Since(began).Round(100*time.Millisecond))
	e.paths, e.counts = splitFixture(t, brokerSet.fixture(t), elasticChunks)
	schedule := []string{"join", "join", "leave", "stall", "kill", "join"}
	for _, what := range schedule {
		base := e.rawNow(ctx)
		ip := e.ingestNext(ctx)
		if untilRAW(ctx, admin, ip, base+uint64(e.counts[e.next-1]/4)) {
			e.during++
		}
		switch what {
		case "join":
			for _, k := range elasticKinds {
				e.join(k)
			}
		case "leave":
			e.each("leave", e.leave)
		case "kill":
			e.each("kill", e.kill)
		case "stall":
			ip = e.stall(ctx, ip)
		}
		ip.wait()
		e.settle()
		t.Logf("%s: settled at %s", what, time.Since(began).Round(100*time.Millisecond))
	}
	for e.next < len(e.paths) {
		e.ingestNext(ctx).wait()
	}
	t.Logf("ingested at %s", time.Since(began).Round(100*time.Millisecond))
	d.logRestarts()
	o := d.outcome(ctx, admin, brokerSet)
	t.Logf("%d of %d windows equal the clean run's", o.equal, o.windows)
	o.require(t)

	waits := e.measure()
	line := fmt.Sprintf("elastic %s: %d steps × %d kinds (%s), %d during ingest, %d events, %d/%d windows equal, %d lost, %d double counted, %s, fenced writes validator %v windower %v, %s",
		shape, len(schedule), len(elasticKinds), strings.Join(schedule, " "), e.during, brokerEvents, o.equal, o.windows, o.lost, o.double,
		waits, e.fenced["validator"], e.fenced["windower"], time.Since(began).Round(time.Second))
	t.Log(line)
	fmt.Println(line)
	if waits.max > elasticTTL+handOverBound {
		t.Errorf("a partition waited %s for an owner (%s), beyond lease-ttl %s + hand-over bound %s", waits.max, waits.maxAt, elasticTTL, handOverBound)
	}
	if e.during < len(schedule)-1 {
		// Each step waits for RAW to grow by a quarter of its chunk, so
		// only a chunk published before the probe saw it can be missed.
		t.Errorf("only %d of %d steps hit while ingest published", e.during, len(schedule))
	}
}

// each records step what of the first live member of each kind and runs
// f on both at once (a leave waits for the exit, so both kinds leave
// together).
func (e *elastic) each(what string, f func(m *member)) {
	var ms []*member
	for _, k := range elasticKinds {
		m := e.first(k)
		m.live = false
		e.steps = append(e.steps, step{what: what, kind: k, member: m.id, at: time.Now()})
		ms = append(ms, m)
	}
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Add(1)
		go func() { defer wg.Done(); f(m) }()
	}
	wg.Wait()
}

// first returns the longest-running live member of kind.
func (e *elastic) first(kind string) *member {
	for _, m := range e.members {
		if m.kind == kind && m.live {
			return m
		}
	}
	e.t.Fatalf("no live %s", kind)
	return nil
}

func (e *elastic) live(kind string) []*member {
	var out []*member
	for _, m := range e.members {
		if m.kind == kind && m.live {
			out = append(out, m)
		}
	}
	return out
}

var joinedRe = regexp.MustCompile(`"msg":"joined the group"[^\n]*?"member":"([^"]+)"`)

// join starts a member of kind and waits until it has joined.
func (e *elastic) join(kind string) {
	t := e.t
	t.Helper()
	at := time.Now()
	p := startProc(t, binaries(t), kind, e.d.env, "--http-addr", fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)),
		"--lease-ttl", elasticTTL.String())
	e.d.procs = append(e.d.procs, p)
	m := &member{proc: p, kind: kind, live: true}
	testenv.CheckFor(t, settleTimeout, 20*time.Millisecond, func() error {
		b, _ := readLog(p)
		if s := joinedRe.FindAllSubmatch(b, -1); len(s) > 0 {
			m.id = string(s[len(s)-1][1])
			return nil
		}
		return fmt.Errorf("%s has not joined its group", kind)
	})
	e.members = append(e.members, m)
	e.steps = append(e.steps, step{what: "join", kind: kind, member: m.id, at: at})
}

// leave stops m with SIGTERM (it hands its partitions over and exits).
func (e *elastic) leave(m *member) {
	m.stop()
	if b, _ := readLog(m.proc); !strings.Contains(string(b), "partitions handed over") {
		e.t.Errorf("the %s %s left without handing its partitions over", m.kind, m.id)
	}
}

// kill SIGKILLs m and does not restart it.
func (e *elastic) kill(m *member) {
	m.mu.Lock()
	m.stopping = true
	m.mu.Unlock()
	m.proc.kill()
	<-m.done
}

// stall stops the first member of each kind (SIGSTOP) until others hold
// every partition it held and a step of the successors has raised each
// one's fence above its epoch (ingesting further chunks meanwhile), then
// continues it (SIGCONT): whatever it still tries to write is refused.
// It returns the ingest running last.
func (e *elastic) stall(ctx context.Context, ip *ingestProc) *ingestProc {
	t := e.t
	t.Helper()
	victims := map[string]*member{}
	for _, k := range elasticKinds {
		m := e.first(k)
		victims[k] = m
		m.signal(syscall.SIGSTOP)
		e.steps = append(e.steps, step{what: "stall", kind: k, member: m.id, at: time.Now()})
	}
	stopped := time.Now()
	var why error
	for {
		why = nil
		for k, m := range victims {
			if err := e.takenAndFenced(ctx, k, m.id, stopped); err != nil {
				why = err
			}
		}
		if why == nil {
			break
		}
		if time.Since(stopped) > settleTimeout {
			t.Fatalf("stalled for %s: %v", settleTimeout, why)
		}
		if ip.finished() && e.next < len(e.paths)-1 {
			ip.wait()
			ip = e.ingestNext(ctx) // traffic for the successors
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("stalled %s; the successors hold and have fenced every partition", time.Since(stopped).Round(100*time.Millisecond))
	e.resume(victims)
	// The woken members find their leases gone (a renewal expecting their
	// revision fails, or their time is up) and rejoin; a step they make
	// before that is refused by the fence and counted.
	for k, m := range victims {
		name := "receiptflow_" + k + "_fenced_writes_total"
		testenv.CheckFor(t, settleTimeout, 50*time.Millisecond, func() error {
			own, err := readyzOwned(m.http)
			if err != nil {
				return err
			}
			if held := e.leases.held(k, m.id); !slices.Equal(own, held) {
				return fmt.Errorf("the woken %s says it owns %v, its leases %v", k, own, held)
			}
			return nil
		})
		v, err := scrape(m.http, name)
		if err != nil {
			t.Fatalf("the woken %s: %v", k, err)
		}
		e.fenced[k] = v
	}
	return ip
}

// takenAndFenced returns nil once the partitions member id of kind held at
// since are held by others, and each one's fence in Redis is above the
// member's epoch there.
func (e *elastic) takenAndFenced(ctx context.Context, kind, id string, since time.Time) error {
	for p, epoch := range e.leases.heldAt(kind, id, since) {
		if h := e.leases.holder(kind, p); h == "" || h == id {
			return fmt.Errorf("%s partition %d not taken over (holder %q)", kind, p, h)
		}
		var fence uint64
		var err error
		if kind == "windower" {
			fence, err = e.rdb.HGet(ctx, e.keys.Checkpoint(p), "fence").Uint64()
		} else {
			fence, err = e.rdb.HGet(ctx, e.keys.ClaimFence(), strconv.Itoa(p)).Uint64()
		}
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		if fence <= epoch {
			return fmt.Errorf("%s partition %d: fence %d, not above the stalled owner's epoch %d", kind, p, fence, epoch)
		}
	}
	return nil
}

// settle waits until each kind's live members hold every partition once
// between them, none more than ceil(P/n), and each one's /readyz names the
// partitions it holds.
func (e *elastic) settle() {
	t := e.t
	t.Helper()
	testenv.CheckFor(t, settleTimeout, 50*time.Millisecond, func() error {
		for _, k := range elasticKinds {
			ms := e.live(k)
			share := (8 + len(ms) - 1) / len(ms)
			n := 0
			for _, m := range ms {
				held := e.leases.held(k, m.id)
				if len(held) > share {
					return fmt.Errorf("%s %s holds %v, more than ceil(8/%d)", k, m.id, held, len(ms))
				}
				own, err := readyzOwned(m.http)
				if err != nil {
					return err
				}
				if !slices.Equal(own, held) {
					return fmt.Errorf("%s %s runs %v, holds %v", k, m.id, own, held)
				}
				n += len(held)
			}
			if n != 8 {
				return fmt.Errorf("the live %ss hold %d of 8 partitions", k, n)
			}
		}
		return nil
	})
}

// ingestNext starts ingesting the next chunk.
func (e *elastic) ingestNext(ctx context.Context) *ingestProc {
	i := e.next
	e.next++
	return e.d.startIngestArgs(ctx, chunkArgs(e.paths, i)...)
}

// rawNow returns the number of messages in RAW.
func (e *elastic) rawNow(ctx context.Context) uint64 {
	var n uint64
	testenv.CheckFor(e.t, currentTimeout, 50*time.Millisecond, func() error {
		var err error
		n, err = rawStored(ctx, e.admin)
		return err
	})
	return n
}

// waits are the measured unowned waits of a run.
type waits struct {
	max, handOver time.Duration
	maxAt         string
	per           map[string]time.Duration // the longest per step kind
}

func (w waits) String() string {
	var per []string
	for _, k := range []string{"join", "leave", "stall", "kill"} {
		per = append(per, fmt.Sprintf("%s %.1f s", k, w.per[k].Seconds()))
	}
	return fmt.Sprintf("max unowned wait %.1f s (%s), lease-ttl %.0f s, hand-over %.1f s; longest per step: %s",
		w.max.Seconds(), w.maxAt, elasticTTL.Seconds(), w.handOver.Seconds(), strings.Join(per, ", "))
}

// measure computes every step's waits from the lease history: for a leave,
// kill or stall, from the step to the next lease of each partition the
// member held; for a join, from the end of the previous holding to the
// joiner's lease, for each partition it took before the next step.
// Hand-over is the longest wait of a leave.
func (e *elastic) measure() waits {
	t := e.t
	w := waits{per: map[string]time.Duration{}}
	note := func(s step, p int, d time.Duration) {
		at := fmt.Sprintf("%s %s of %s, partition %d", s.kind, s.what, s.member, p)
		t.Logf("unowned %s: %s", at, d.Round(time.Millisecond))
		if d > w.max {
			w.max, w.maxAt = d, s.kind+" "+s.what
		}
		w.per[s.what] = max(w.per[s.what], d)
		if s.what == "leave" {
			w.handOver = max(w.handOver, d)
		}
	}
	for i, s := range e.steps {
		if s.what != "join" {
			for p := range e.leases.heldAt(s.kind, s.member, s.at) {
				next, ok := e.leases.takenAfter(s.kind, p, s.at, s.member)
				if s.what == "stall" && !s.resumed.IsZero() && (!ok || next.After(s.resumed)) {
					note(s, p, s.resumed.Sub(s.at)) // continued before its lease ran out: it kept p
					continue
				}
				if !ok {
					t.Errorf("%s partition %d of %s (%s) was never taken over", s.kind, p, s.member, s.what)
					continue
				}
				note(s, p, next.Sub(s.at))
			}
			continue
		}
		until := time.Now()
		for _, later := range e.steps[i+1:] {
			if later.kind == s.kind && later.what != "join" {
				until = later.at
				break
			}
		}
		for p, gap := range e.leases.joinGaps(s.kind, s.member, s.at, until) {
			note(s, p, gap)
		}
	}
	return w
}

// leaseEvent is one write of the lease bucket: a lease written by holder
// (taken or renewed), or a marker ending one (holder "").
type leaseEvent struct {
	seq    uint64
	at     time.Time
	kind   string
	p      int
	holder string
	epoch  uint64
	reason string
}

// leaseLog is the lease bucket's stream as written, read by an ordered
// consumer from the start.
type leaseLog struct {
	mu     sync.Mutex
	events []leaseEvent
}

func recordLeases(t *testing.T, ctx context.Context, js jetstream.JetStream) *leaseLog {
	t.Helper()
	bucket := wire.For("").LeaseBucket()
	l := &leaseLog{}
	var cons jetstream.ConsumeContext
	testenv.CheckFor(t, currentTimeout, 100*time.Millisecond, func() error {
		c, err := js.OrderedConsumer(ctx, "KV_"+bucket, jetstream.OrderedConsumerConfig{})
		if err != nil {
			return err
		}
		cons, err = c.Consume(func(m jetstream.Msg) {
			md, err := m.Metadata()
			if err != nil {
				return
			}
			kind, rest, ok := strings.Cut(strings.TrimPrefix(m.Subject(), "$KV."+bucket+"."), ".lease.")
			p, perr := strconv.Atoi(rest)
			if !ok || perr != nil {
				return // a member key
			}
			ev := leaseEvent{seq: md.Sequence.Stream, at: md.Timestamp, kind: kind, p: p}
			if op := m.Headers().Get("KV-Operation"); op != "" {
				ev.reason = op
			} else if r := m.Headers().Get(jetstream.MarkerReasonHeader); r != "" {
				ev.reason = r
			} else {
				var v struct {
					Holder string `json:"holder"`
					Epoch  uint64 `json:"epoch"`
				}
				if json.Unmarshal(m.Data(), &v) == nil {
					ev.holder, ev.epoch = v.Holder, v.Epoch
				}
				if ev.epoch == 0 {
					ev.epoch = ev.seq // the acquiring write: its revision is the epoch
				}
			}
			l.mu.Lock()
			l.events = append(l.events, ev)
			l.mu.Unlock()
		})
		return err
	})
	t.Cleanup(cons.Stop)
	return l
}

// state returns each partition's last event of kind up to at.
func (l *leaseLog) state(kind string, at time.Time) map[int]leaseEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[int]leaseEvent{}
	for _, ev := range l.events {
		if ev.at.After(at) {
			break
		}
		if ev.kind == kind {
			out[ev.p] = ev
		}
	}
	return out
}

// heldAt returns the partitions id held at at and their epochs.
func (l *leaseLog) heldAt(kind, id string, at time.Time) map[int]uint64 {
	out := map[int]uint64{}
	for p, ev := range l.state(kind, at) {
		if ev.holder == id {
			out[p] = ev.epoch
		}
	}
	return out
}

// held returns the partitions id holds now, ascending.
func (l *leaseLog) held(kind, id string) []int {
	var out []int
	for p := range l.heldAt(kind, id, time.Now().Add(time.Hour)) {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// holder returns partition p's holder now ("" none).
func (l *leaseLog) holder(kind string, p int) string {
	return l.state(kind, time.Now().Add(time.Hour))[p].holder
}

// takenAfter returns when someone other than id first wrote p's lease
// after at.
func (l *leaseLog) takenAfter(kind string, p int, at time.Time, id string) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ev := range l.events {
		if ev.kind == kind && ev.p == p && ev.at.After(at) && ev.holder != "" && ev.holder != id {
			return ev.at, true
		}
	}
	return time.Time{}, false
}

// joinGaps returns, for each partition id took between from and until,
// how long it had no holder before (from the marker ending the previous
// holding, or from when id joined if p was never held).
func (l *leaseLog) joinGaps(kind, id string, from, until time.Time) map[int]time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[int]time.Duration{}
	last := map[int]leaseEvent{}
	for _, ev := range l.events {
		if ev.kind != kind {
			continue
		}
		prev, seen := last[ev.p]
		last[ev.p] = ev
		if ev.holder != id || ev.at.Before(from) || ev.at.After(until) || (seen && prev.holder == id) {
			continue
		}
		if _, done := out[ev.p]; done {
			continue
		}
		since := from
		if seen && prev.holder == "" && prev.at.After(from) {
			since = prev.at
		}
		out[ev.p] = ev.at.Sub(since)
	}
	return out
}

// readLog returns what a process wrote to its log so far.
func readLog(p *proc) ([]byte, error) {
	return os.ReadFile(p.log.Name())
}

// readyzOwned returns the partitions a process's /readyz says it owns.
func readyzOwned(addr string) ([]int, error) {
	body, err := get("http://" + addr + "/readyz")
	if err != nil {
		return nil, err
	}
	_, list, ok := strings.Cut(body, "owned partitions: ")
	if !ok {
		return nil, fmt.Errorf("/readyz of %s names no owned partitions: %q", addr, body)
	}
	list, _, _ = strings.Cut(list, "\n")
	if list == "none" {
		return nil, nil
	}
	var out []int
	for _, s := range strings.Split(list, ",") {
		p, err := strconv.Atoi(s)
		if err != nil {
			return nil, fmt.Errorf("/readyz of %s: %q", addr, body)
		}
		out = append(out, p)
	}
	return out, nil
}

// scrape reads a sample without labels from a process's /metrics.
func scrape(addr, name string) (float64, error) {
	body, err := get("http://" + addr + "/metrics")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(rest), 64)
		}
	}
	return 0, fmt.Errorf("%s not in the /metrics of %s", name, addr)
}

func get(url string) (string, error) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}
