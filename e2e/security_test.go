package e2e

// Least privilege, enforced and tested (issue 6, point 1). The servers load
// the deployment's own files (deploy/nats/nats.conf with auth.conf,
// deploy/redis/redis.conf with users.acl) and every principal logs in with
// its deploy/secrets/dev password:
//
//   - TestSecurityPipelineRunsWithDeployedPermissions: the whole pipeline,
//     each service as its own user, two windower instances splitting the
//     partitions, the dashboard reading through its user: the windows
//     equal a clean embedded run, no service was refused anything (no
//     violation logged, Redis ACL LOG empty), no secret reached a log, and
//     every service serves /metrics, /healthz and /readyz.
//   - TestSecurityNATSRefusesOutsideRights and
//     TestSecurityRedisRefusesOutsideRights: every principal is refused
//     outside its rights, and the refusal names what was refused.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/daemon"
	"github.com/receiptflow/receiptflow/pkg/dashboard"
	"github.com/receiptflow/receiptflow/pkg/explain"
	"github.com/receiptflow/receiptflow/pkg/ledger"
	"github.com/receiptflow/receiptflow/pkg/pipeline"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// secSetup creates the streams and buckets the way the deployment's set-up
// job does: a service binary with --ensure-only and the admin user.
func secSetup(t testing.TB, ctx context.Context, natsURL string, replicas int) {
	t.Helper()
	var log secLog
	// Like the deployment's job (restart on failure), try again while a
	// fresh cluster is still placing peers.
	for attempt := 1; ; attempt++ {
		code := daemon.Main(ctx, "validator", []string{"--ensure-only", "--nats-url", natsURL,
			"--nats-user", "admin", "--nats-password-file", secPasswordFile("nats", "admin"),
			"--partitions", "8", "--replicas", fmt.Sprint(replicas)}, &log, secBuild("validator"))
		if code == 0 {
			return
		}
		if attempt == 5 || ctx.Err() != nil {
			t.Fatalf("set-up job (--ensure-only as admin) exited %d %d times:\n%s", code, attempt, log.String())
		}
		time.Sleep(time.Second)
	}
}

func TestSecurityPipelineRunsWithDeployedPermissions(t *testing.T) {
	events := secGenerate(t, 4000, 7)
	clean := secCleanRun(t, events)

	rs := secRedisServer(t)
	_, natsURL := secNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	secSetup(t, ctx, natsURL, 1)

	svcCtx, stopServices := secServiceContext()
	defer stopServices()
	procs := []*secProc{
		secStartService(t, svcCtx, "validator", "validator", secServiceArgs("validator", natsURL, rs.url())),
		secStartService(t, svcCtx, "windower-0", "windower", secServiceArgs("windower", natsURL, rs.url(), "--instance", "0", "--instances", "2")),
		secStartService(t, svcCtx, "windower-1", "windower", secServiceArgs("windower", natsURL, rs.url(), "--instance", "1", "--instances", "2")),
		secStartService(t, svcCtx, "publisher", "publisher", secServiceArgs("publisher", natsURL, rs.url())),
	}

	// The dashboard package, as its own user.
	dashConn := secConnect(t, natsURL, "dashboard")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// Its drawer explains windows through its own Redis user (read-only).
	dashRedis := rs.client("dashboard", secPassword(t, "redis", "dashboard"))
	defer dashRedis.Close()
	dash, err := dashboard.New(dashConn.NC, dashboard.Config{Listener: ln, Registerer: prometheus.NewRegistry(),
		Explain: explain.ForDeployment(dashConn.JS, dashRedis)})
	if err != nil {
		t.Fatal(err)
	}
	dashDone := make(chan error, 1)
	go func() { dashDone <- dash.Run(svcCtx) }()

	ingestConn := secConnect(t, natsURL, "ingest")
	st := secIngest(t, ctx, ingestConn.JS, events)
	admin := secConnect(t, natsURL, "admin")
	secWaitDrained(t, ctx, admin.JS, 8+8+1, 60*time.Second)

	// The windows, read through the dashboard's user, equal the clean run.
	got, err := pipeline.ReadWindows(ctx, dashConn.JS, wire.For(""))
	if err != nil {
		t.Fatalf("dashboard user reads the bucket: %v", err)
	}
	secSameWindows(t, got, clean)
	t.Logf("%d records ingested, %d windows equal to the clean run", st.Records, len(got))

	// The dashboard service shows them too.
	secCheckFor(t, 10*time.Second, func() error {
		var v dashboard.View
		if err := secGetJSON("http://"+ln.Addr().String()+"/api/windows", &v); err != nil {
			return err
		}
		if len(v.Windows) != len(clean) {
			return fmt.Errorf("dashboard shows %d windows, want %d", len(v.Windows), len(clean))
		}
		for _, w := range v.Windows {
			if !w.Final {
				return fmt.Errorf("dashboard shows %s as %s", w.WindowID, w.Status)
			}
		}
		return nil
	})

	// The publisher read the pointer under its rights: its bucket says
	// generation 1 is active, and that it is generation 1's.
	secCheckFor(t, 10*time.Second, func() error {
		kv, err := dashConn.JS.KeyValue(ctx, "receipts-1")
		if err != nil {
			return err
		}
		e, err := kv.Get(ctx, wire.ActiveKey)
		if err != nil {
			return err
		}
		var m wire.GenerationMeta
		if err := json.Unmarshal(e.Value(), &m); err != nil || m != wire.MetaOf("1", "1") {
			return fmt.Errorf("receipts-1 %s = %s (%v)", wire.ActiveKey, e.Value(), err)
		}
		return nil
	})

	// The health panel's rejected-by-reason tally, counted by the
	// publisher's user, holds every REJECTED message (issue 26).
	rej, err := admin.JS.Stream(ctx, wire.Rejected)
	if err != nil {
		t.Fatal(err)
	}
	ri, err := rej.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	secCheckFor(t, 10*time.Second, func() error {
		var h dashboard.HealthView
		if err := secGetJSON("http://"+ln.Addr().String()+"/api/health", &h); err != nil {
			return err
		}
		if h.Health == nil || h.Health.Rejected == nil || h.Health.Rejected.Total != ri.State.Msgs || ri.State.Msgs == 0 {
			return fmt.Errorf("health's rejected tally %+v, REJECTED holds %d", h.Health, ri.State.Msgs)
		}
		return nil
	})

	// Each conflicting copy's row names the window of the copy counted
	// for its id: the validator read that copy from RAW under its rights.
	conflicts := 0
	if err := stream.ReadAll(ctx, admin.JS, wire.Rejected, func(m jetstream.Msg) error {
		h := m.Headers()
		if contract.Reason(h.Get(wire.HdrReason)) != contract.ReasonConflictingDuplicate {
			return nil
		}
		conflicts++
		if h.Get(wire.HdrWindow) == "" {
			return fmt.Errorf("the conflicting_duplicate row of RAW %s names no window", h.Get(wire.HdrRawSeq))
		}
		return nil
	}); err != nil || conflicts == 0 {
		t.Fatalf("%d conflicting_duplicate rows: %v", conflicts, err)
	}

	// The dashboard explains a window as receiptctl explain does (as admin).
	adminRedisStore := rs.client("admin", secPassword(t, "redis", "admin"))
	defer adminRedisStore.Close()
	for _, w := range []wire.Window{got[0], got[len(got)-1]} {
		want, err := explain.ForDeployment(admin.JS, adminRedisStore)(ctx, "", w.WindowID)
		if err != nil {
			t.Fatalf("explain %s as admin: %v", w.WindowID, err)
		}
		var e explain.Explanation
		if err := secGetJSON("http://"+ln.Addr().String()+"/api/explain/"+w.WindowID, &e); err != nil {
			t.Fatalf("the dashboard explains %s through its users: %v", w.WindowID, err)
		}
		if !reflect.DeepEqual(&e, want) || e.Count != w.Count {
			t.Fatalf("the dashboard's explanation of %s:\n%+v\nreceiptctl explain's:\n%+v", w.WindowID, e, want)
		}
	}

	// Probes and metrics of every service.
	for _, p := range procs {
		secCheckFor(t, 5*time.Second, func() error {
			for _, path := range []string{"/healthz", "/readyz"} {
				if code, body, err := p.get(path); err != nil || code != http.StatusOK {
					return fmt.Errorf("%s %s: %d %q %v", p.name, path, code, body, err)
				}
			}
			_, body, err := p.get("/metrics")
			if err != nil {
				return err
			}
			for _, m := range secWantMetrics[strings.TrimRight(p.name, "-01")] {
				if !regexp.MustCompile(`(?m)^` + m + `[{ ]`).MatchString(body) {
					return fmt.Errorf("%s /metrics has no %s", p.name, m)
				}
			}
			return nil
		})
	}

	// Nothing was refused on the allowed path.
	stopServices()
	if err := <-dashDone; err != nil {
		t.Errorf("dashboard: %v", err)
	}
	for _, p := range procs {
		<-p.done
		if strings.Contains(p.log.String(), "nats refused an operation") {
			t.Errorf("%s was refused by NATS on the allowed path:\n%s", p.name, p.log.String())
		}
		for _, err := range p.exitErrors() {
			// A missed pull heartbeat on a loaded 2-core runner restarts a
			// service (harmlessly: it resumes from its checkpoint); any
			// other exit is a failure.
			if !strings.Contains(err, "no heartbeat received") {
				t.Errorf("%s exited: %s\n%s", p.name, err, p.log.String())
			}
		}
		t.Logf("%s: %d runs", p.name, p.runs.Load())
	}
	for _, c := range []*secConn{dashConn, ingestConn} {
		c.mu.Lock()
		if len(c.errs) > 0 {
			t.Errorf("%s was refused by NATS on the allowed path: %v", c.user, c.errs)
		}
		c.mu.Unlock()
	}
	adminRedis := rs.client("admin", secPassword(t, "redis", "admin"))
	defer adminRedis.Close()
	denials, err := adminRedis.Do(ctx, "ACL", "LOG").Slice()
	if err != nil {
		t.Fatal(err)
	}
	if len(denials) != 0 {
		t.Errorf("Redis denied %d operations on the allowed path: %v", len(denials), denials)
	}
	logs := []*secLog{}
	for _, p := range procs {
		logs = append(logs, p.log)
	}
	secNoSecretsLogged(t, logs...)
}

// secWantMetrics are metric families each service must expose, former
// names of renamed metrics included for as long as CHANGELOG.md promises.
var secWantMetrics = map[string][]string{
	"validator": {"receiptflow_validator_messages_in_total", "receiptflow_validator_messages_out_total", "receiptflow_validator_batch_size_messages_bucket",
		"receiptflow_validator_batch_size_bucket",
		"receiptflow_validator_consumer_pending_messages", "receiptflow_validator_consumer_ack_pending_messages",
		"receiptflow_validator_nats_connected", "receiptflow_validator_redis_up", "receiptflow_validator_ready"},
	"windower": {"receiptflow_windower_events_total", "receiptflow_windower_script_seconds_bucket", "receiptflow_windower_batch_size_messages_bucket",
		"receiptflow_windower_watermark_timestamp_seconds", "receiptflow_windower_watermark_seconds", "receiptflow_windower_consumer_pending_messages",
		"receiptflow_windower_state_ledger_entries", "receiptflow_windower_state_windows", "receiptflow_windower_watermark_lag_seconds",
		"receiptflow_windower_ready"},
	"publisher": {"receiptflow_publisher_kv_writes_total", "receiptflow_publisher_consumer_pending_messages",
		"receiptflow_publisher_state_ledger_entries", "receiptflow_publisher_state_windows", "receiptflow_publisher_checkpoint_watermark_timestamp_seconds",
		"receiptflow_publisher_checkpoint_watermark_seconds",
		"receiptflow_publisher_ready"},
}

func secGetJSON(url string, v any) error {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1000))
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// secCheckFor polls f until it returns nil, for at most total.
func secCheckFor(t testing.TB, total time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(total)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still failing after %s: %v", total, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// errSent: a plain publish has no reply; the refusal arrives on its own.
var errSent = errors.New("published without a reply; refusal expected asynchronously")

// secNATSCase is one operation a principal must be refused, and the
// subject the server must name.
type secNATSCase struct {
	what    string
	subject string
	op      func(ctx context.Context, c *secConn) error
}

func jsPublish(subject string) func(context.Context, *secConn) error {
	return func(ctx context.Context, c *secConn) error {
		_, err := c.JS.Publish(ctx, subject, []byte(`{"schema_version":2}`))
		return err
	}
}

func apiRequest(subject string) func(context.Context, *secConn) error {
	return func(ctx context.Context, c *secConn) error {
		_, err := c.NC.RequestWithContext(ctx, subject, []byte(`{}`))
		return err
	}
}

func plainPublish(subject string) func(context.Context, *secConn) error {
	return func(_ context.Context, c *secConn) error {
		if err := c.NC.Publish(subject, nil); err != nil {
			return err
		}
		c.NC.Flush()
		return errSent
	}
}

func createConsumer(streamName, durable, filter string) func(context.Context, *secConn) error {
	return func(ctx context.Context, c *secConn) error {
		_, err := c.JS.CreateConsumer(ctx, streamName, jetstream.ConsumerConfig{Durable: durable, FilterSubject: filter, AckPolicy: jetstream.AckExplicitPolicy})
		return err
	}
}

func TestSecurityNATSRefusesOutsideRights(t *testing.T) {
	_, url := secNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	secSetup(t, ctx, url, 1)
	// A snapshot to read, written by the publisher's user.
	pub := secConnect(t, url, "publisher")
	kv, err := pub.JS.KeyValue(ctx, "receipts-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "window.2026-12-02T10", []byte(`{"window_id":"2026-12-02T10"}`)); err != nil {
		t.Fatalf("publisher writes its bucket: %v", err)
	}

	t.Run("no credentials", func(t *testing.T) {
		for _, sec := range []connect.NATSSecurity{{}, {User: "validator", Password: "not-the-password"}, {User: "mallory", Password: "x"}} {
			_, err := secTryConnect(t, url, "anonymous", sec)
			if err == nil || !strings.Contains(err.Error(), "Authorization Violation") {
				t.Fatalf("connect as %q: %v, want an authorization violation", sec.User, err)
			}
			t.Logf("refused connect as %q: %v", sec.User, err)
		}
	})

	const kvKey = "$KV.receipts-1.window.2026-12-02T10"
	const getKey = "$JS.API.DIRECT.GET.KV_receipts-1." + kvKey
	cases := map[string][]secNATSCase{
		"ingest": {
			{"publish a validated event", "rf.valid.0", jsPublish("rf.valid.0")},
			{"open the bucket", "$JS.API.STREAM.INFO.KV_receipts-1", func(ctx context.Context, c *secConn) error { _, err := c.JS.KeyValue(ctx, "receipts-1"); return err }},
			{"read RAW back", "$JS.API.CONSUMER.CREATE.RAW.peek.rf.raw.0", createConsumer("RAW", "peek", "rf.raw.0")},
			{"create a stream", "$JS.API.STREAM.CREATE.EVIL", func(ctx context.Context, c *secConn) error {
				_, err := c.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "EVIL", Subjects: []string{"evil.>"}})
				return err
			}},
			// It answers producers and the operator, nobody else.
			{"write into the validator's inbox", "_INBOX.validator.x", plainPublish("_INBOX.validator.x")},
			{"submit to the front door", "rf.submit", plainPublish("rf.submit")},
		},
		// The front door's NATS producers (docs/spec.md §10): a request to
		// rf.submit and its answer, nothing else.
		"producer": {
			{"forge input", "rf.raw.0", jsPublish("rf.raw.0")},
			{"forge input without an ack", "rf.raw.7", plainPublish("rf.raw.7")},
			{"publish a validated event", "rf.valid.0", jsPublish("rf.valid.0")},
			{"call the JetStream API", "$JS.API.INFO", func(ctx context.Context, c *secConn) error { _, err := c.JS.AccountInfo(ctx); return err }},
			{"look RAW up", "$JS.API.STREAM.INFO.RAW", func(ctx context.Context, c *secConn) error { _, err := c.JS.Stream(ctx, "RAW"); return err }},
			{"read RAW", "$JS.API.CONSUMER.CREATE.RAW.peek.rf.raw.0", createConsumer("RAW", "peek", "rf.raw.0")},
			{"read the bucket", getKey, apiRequest(getKey)},
			{"write the bucket", kvKey, jsPublish(kvKey)},
			{"forge an ack to the ingest service", "_INBOX.ingest.x", plainPublish("_INBOX.ingest.x")},
			{"ask the micro services", "$SRV.INFO.ingest", apiRequest("$SRV.INFO.ingest")},
		},
		"validator": {
			{"forge input", "rf.raw.0", jsPublish("rf.raw.0")},
			{"publish a late event", "rf.late.0", jsPublish("rf.late.0")},
			{"publish a change notice", "rf.changes.0", jsPublish("rf.changes.0")},
			{"write the bucket", kvKey, jsPublish(kvKey)},
			{"read the bucket", getKey, apiRequest(getKey)},
			{"open the bucket", "$JS.API.STREAM.INFO.KV_receipts-1", func(ctx context.Context, c *secConn) error { _, err := c.JS.KeyValue(ctx, "receipts-1"); return err }},
			{"consume VALID", "$JS.API.CONSUMER.CREATE.VALID.windower-p0.rf.valid.0", createConsumer("VALID", "windower-p0", "rf.valid.0")},
			{"bind its durable to another partition", "$JS.API.CONSUMER.CREATE.RAW.validator-p0.rf.raw.1", createConsumer("RAW", "validator-p0", "rf.raw.1")},
			{"bind its durable to every partition", "$JS.API.CONSUMER.CREATE.RAW.validator-p0", createConsumer("RAW", "validator-p0", "")},
			{"delete RAW", "$JS.API.STREAM.DELETE.RAW", func(ctx context.Context, c *secConn) error { return c.JS.DeleteStream(ctx, "RAW") }},
			{"purge RAW", "$JS.API.STREAM.PURGE.RAW", apiRequest("$JS.API.STREAM.PURGE.RAW")},
			{"ack the windower's messages", "$JS.ACK.VALID.windower-p0.1.1.1.1.0", plainPublish("$JS.ACK.VALID.windower-p0.1.1.1.1.0")},
		},
		"windower": {
			{"publish a validated event", "rf.valid.0", jsPublish("rf.valid.0")},
			{"forge input", "rf.raw.0", jsPublish("rf.raw.0")},
			{"publish a rejection", "rf.rejected.0", jsPublish("rf.rejected.0")},
			{"write the bucket", kvKey, jsPublish(kvKey)},
			{"read RAW", "$JS.API.CONSUMER.CREATE.RAW.peek.rf.raw.0", createConsumer("RAW", "peek", "rf.raw.0")},
			{"delete the validator's consumer", "$JS.API.CONSUMER.DELETE.RAW.validator-p0", apiRequest("$JS.API.CONSUMER.DELETE.RAW.validator-p0")},
			{"change VALID", "$JS.API.STREAM.UPDATE.VALID", apiRequest("$JS.API.STREAM.UPDATE.VALID")},
			{"delete a VALID message", "$JS.API.STREAM.MSG.DELETE.VALID", apiRequest("$JS.API.STREAM.MSG.DELETE.VALID")},
		},
		"publisher": {
			{"forge input", "rf.raw.0", jsPublish("rf.raw.0")},
			{"publish a change notice", "rf.changes.0", jsPublish("rf.changes.0")},
			{"switch the active generation", "$KV.receipts.meta.generation", jsPublish("$KV.receipts.meta.generation")},
			{"purge the bucket", "$JS.API.STREAM.PURGE.KV_receipts-1", apiRequest("$JS.API.STREAM.PURGE.KV_receipts-1")},
			{"delete the bucket", "$JS.API.STREAM.DELETE.KV_receipts-1", apiRequest("$JS.API.STREAM.DELETE.KV_receipts-1")},
			{"read VALID", "$JS.API.CONSUMER.CREATE.VALID.peek.rf.valid.0", createConsumer("VALID", "peek", "rf.valid.0")},
			{"read a RAW message", "$JS.API.STREAM.MSG.GET.RAW", apiRequest("$JS.API.STREAM.MSG.GET.RAW")},
			{"ack the windower's messages", "$JS.ACK.VALID.windower-p0.1.1.1.1.0", plainPublish("$JS.ACK.VALID.windower-p0.1.1.1.1.0")},
		},
		"dashboard": {
			{"write the bucket", kvKey, func(ctx context.Context, c *secConn) error {
				kv, err := c.JS.KeyValue(ctx, "receipts-1")
				if err != nil {
					return err
				}
				_, err = kv.Put(ctx, "window.2026-12-02T10", []byte(`{"count":1000000}`))
				return err
			}},
			{"delete a window", kvKey, func(ctx context.Context, c *secConn) error {
				kv, err := c.JS.KeyValue(ctx, "receipts-1")
				if err != nil {
					return err
				}
				return kv.Delete(ctx, "window.2026-12-02T10")
			}},
			{"switch the active generation", "$KV.receipts.meta.generation", jsPublish("$KV.receipts.meta.generation")},
			{"purge the bucket", "$JS.API.STREAM.PURGE.KV_receipts-1", apiRequest("$JS.API.STREAM.PURGE.KV_receipts-1")},
			{"forge input", "rf.raw.0", jsPublish("rf.raw.0")},
			{"read RAW", "$JS.API.CONSUMER.CREATE.RAW.peek.rf.raw.0", createConsumer("RAW", "peek", "rf.raw.0")},
			{"watch outside the bucket", "$JS.API.CONSUMER.CREATE.KV_receipts-1.peek.rf.raw.>", apiRequest("$JS.API.CONSUMER.CREATE.KV_receipts-1.peek.rf.raw.>")},
			// It reads LATE and REJECTED (the explanation drawer), never writes them.
			{"forge a late row", "rf.late.0", jsPublish("rf.late.0")},
			{"forge a rejection", "rf.rejected.0", jsPublish("rf.rejected.0")},
			{"purge LATE", "$JS.API.STREAM.PURGE.LATE", apiRequest("$JS.API.STREAM.PURGE.LATE")},
			{"read VALID", "$JS.API.CONSUMER.CREATE.VALID.peek.rf.valid.0", createConsumer("VALID", "peek", "rf.valid.0")},
		},
	}
	subs := map[string][]string{
		"ingest":    {"rf.>", "_INBOX.>", "rf.submit", "_INBOX.producer.>", "$SRV.>"},
		"producer":  {"rf.raw.>", "rf.>", "rf.submit", "_INBOX.>", "_INBOX.ingest.>", "$SRV.>", "$JS.>"},
		"validator": {"rf.raw.>", "_INBOX.>", "_INBOX.windower.>"},
		"windower":  {"rf.>", "_INBOX.validator.>"},
		"publisher": {"$KV.>", "_INBOX.dashboard.>"},
		"dashboard": {"$KV.receipts-1.>", "_INBOX.publisher.>", "$JS.>"},
	}
	for user, list := range cases {
		t.Run(user, func(t *testing.T) {
			t.Parallel()
			c := secConnect(t, url, user)
			for _, tc := range list {
				c.refused(t, tc.what, tc.subject, func(ctx context.Context) error { return tc.op(ctx, c) })
			}
			for _, s := range subs[user] {
				c.refusedSub(t, s)
			}
		})
	}

	// What the dashboard may do stays read-only: a consumer it creates on
	// the bucket, pushed at a stream subject, puts nothing into RAW.
	t.Run("dashboard push consumer", func(t *testing.T) {
		c := secConnect(t, url, "dashboard")
		req := `{"stream_name":"KV_receipts-1","config":{"name":"push","deliver_subject":"rf.raw.0","filter_subject":"$KV.receipts-1.>","ack_policy":"none","deliver_policy":"all"}}`
		if _, err := c.NC.Request("$JS.API.CONSUMER.CREATE.KV_receipts-1.push.$KV.receipts-1.>", []byte(req), 2*time.Second); err != nil {
			t.Fatal(err)
		}
		admin := secConnect(t, url, "admin")
		raw, err := admin.JS.Stream(ctx, "RAW")
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond) // give a delivery the chance to happen
		if info, err := raw.Info(ctx); err != nil || info.State.Msgs != 0 {
			t.Fatalf("RAW holds %d messages after a dashboard push consumer aimed at rf.raw.0 (%v)", info.State.Msgs, err)
		}
	})
}

// secRedisCase is one Redis operation a user must be refused.
type secRedisCase struct {
	what string
	op   func(ctx context.Context, c *redis.Client) error
}

func redisDo(args ...any) func(context.Context, *redis.Client) error {
	return func(ctx context.Context, c *redis.Client) error { return c.Do(ctx, args...).Err() }
}

func TestSecurityRedisRefusesOutsideRights(t *testing.T) {
	rs := secRedisServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const ckpt = "rf:1:{p0}:ckpt"
	// Today's claims: a past day's bucket would expire as it is written.
	today := time.Now().Unix() / 86400
	claims := ledger.Keys{Prefix: "rf:1:"}.Claims("e1", today)
	e1 := ledger.IDKey("e1")
	// Some state, written by the users that own it.
	win := rs.client("windower", secPassword(t, "redis", "windower"))
	defer win.Close()
	if err := win.HSet(ctx, ckpt, "seq", 1).Err(); err != nil {
		t.Fatalf("windower writes its checkpoint: %v", err)
	}
	val := rs.client("validator", secPassword(t, "redis", "validator"))
	defer val.Close()
	// With a replay horizon the claims are filed by ingest day (without
	// one they are kept for ever, under day 0).
	store := ledger.NewStore(val, ledger.Config{Keys: ledger.Keys{Prefix: "rf:1:"}, Lateness: 5 * time.Minute, Grace: time.Hour, Horizon: 24 * time.Hour})
	if _, err := store.Claims(ctx, []ledger.Claim{{EventID: "e1", Fingerprint: 1, Day: today}}); err != nil {
		t.Fatalf("validator claims an event id: %v", err)
	}

	// The publisher forgets a pruned window's explain records.
	pub := rs.client("publisher", secPassword(t, "redis", "publisher"))
	defer pub.Close()
	if err := win.HSet(ctx, "rf:1:{p0}:x:2026-12-02T09", "#o", 1, "#v", 1).Err(); err != nil {
		t.Fatalf("windower writes an explain record: %v", err)
	}
	pubStore := ledger.NewStore(pub, ledger.Config{Keys: ledger.Keys{Prefix: "rf:1:"}})
	if err := pubStore.Forget(ctx, []int{0, 1}, "2026-12-02T09"); err != nil {
		t.Fatalf("publisher forgets a pruned window's explain records: %v", err)
	}

	t.Run("no credentials", func(t *testing.T) {
		anon := redis.NewClient(&redis.Options{Addr: rs.addr, DisableIdentity: true, Protocol: 2, MaxRetries: -1})
		defer anon.Close()
		secRedisErr(t, "default", "PING without logging in", anon.Ping(ctx).Err())
		for user, pw := range map[string]string{"default": "", "dashboard": "not-the-password", "windower": "not-the-password"} {
			c := rs.client(user, pw)
			secRedisErr(t, user, "log in", c.Ping(ctx).Err())
			c.Close()
		}
	})

	cases := map[string][]secRedisCase{
		"validator": {
			{"write a checkpoint", redisDo("HSET", ckpt, "seq", 999)},
			{"read a checkpoint", redisDo("HGET", ckpt, "seq")},
			{"run a script of its own", redisDo("EVAL", "return 1", 0)},
			{"apply a batch", func(ctx context.Context, c *redis.Client) error {
				_, err := ledger.NewStore(c, ledger.Config{Keys: ledger.Keys{Prefix: "rf:1:"}, Lateness: time.Minute, Grace: time.Hour}).Apply(ctx, 0, []ledger.Record{{Seq: 9, Kind: ledger.Submission, EventID: "x", Time: 1764669600000}}, 0, 0)
				return err
			}},
			{"list keys", redisDo("KEYS", "*")},
			{"flush", redisDo("FLUSHALL")},
			{"reconfigure", redisDo("CONFIG", "SET", "appendonly", "no")},
		},
		"windower": {
			{"touch claims", redisDo("HSETNX", claims, "e2", "1")},
			{"read claims", redisDo("HGET", claims, e1)},
			{"touch claims from a script", redisDo("EVAL", "return redis.call('HSET', KEYS[1], 'e1', 'f')", 1, claims)},
			{"reach claims from a script by name", redisDo("EVAL", "return redis.call('HSET', '"+claims+"', 'e1', 'f')", 1, ckpt)},
			{"flush from a script", redisDo("EVAL", "return redis.call('FLUSHALL')", 1, ckpt)},
			{"run an arbitrary command", redisDo("SET", "rf:1:{p0}:x", "1")},
			{"list keys", redisDo("KEYS", "*")},
			{"flush", redisDo("FLUSHDB")},
			{"flush the script cache", redisDo("SCRIPT", "FLUSH")},
			{"turn persistence off", redisDo("CONFIG", "SET", "appendfsync", "no")},
			{"change users", redisDo("ACL", "SETUSER", "windower", "+@all")},
			{"stop the server", redisDo("SHUTDOWN", "NOSAVE")},
		},
		"publisher": {
			{"write a checkpoint", redisDo("HSET", ckpt, "seq", 999)},
			{"delete state", redisDo("DEL", ckpt)},
			{"delete a partial (its DEL is for explain records only)", redisDo("DEL", "rf:1:{p0}:w:2026-12-02T10")},
			{"delete a ledger shard from a script", redisDo("EVAL", "return redis.call('DEL', KEYS[1])", 1, "rf:1:{p0}:l:2026-12-02T10:3")},
			{"write an explain record", redisDo("HSET", "rf:1:{p0}:x:2026-12-02T10", "#d", 1)},
			{"write from a script", redisDo("EVAL", "return redis.call('HSET', KEYS[1], 'seq', 999)", 1, ckpt)},
			{"apply a batch (apply.lua)", func(ctx context.Context, c *redis.Client) error {
				_, err := ledger.NewStore(c, ledger.Config{Keys: ledger.Keys{Prefix: "rf:1:"}, Lateness: time.Minute, Grace: time.Hour}).Apply(ctx, 0, []ledger.Record{{Seq: 9, Kind: ledger.Submission, EventID: "x", Time: 1764669600000}}, 0, 0)
				return err
			}},
			{"read claims", redisDo("HGET", claims, e1)},
			{"flush", redisDo("FLUSHALL")},
		},
		"dashboard": {
			{"write a checkpoint", redisDo("HSET", ckpt, "seq", 999)},
			{"delete state", redisDo("DEL", ckpt)},
			{"write from a script", redisDo("EVAL", "return redis.call('HSET', KEYS[1], 'seq', 999)", 1, ckpt)},
			{"apply a batch (apply.lua)", func(ctx context.Context, c *redis.Client) error {
				_, err := ledger.NewStore(c, ledger.Config{Keys: ledger.Keys{Prefix: "rf:1:"}, Lateness: time.Minute, Grace: time.Hour}).Apply(ctx, 0, []ledger.Record{{Seq: 9, Kind: ledger.Submission, EventID: "x", Time: 1764669600000}}, 0, 0)
				return err
			}},
			{"read claims", redisDo("HGET", claims, e1)},
			{"list keys", redisDo("KEYS", "*")},
			{"flush", redisDo("FLUSHALL")},
		},
		"probe": {
			{"read a checkpoint", redisDo("HGET", ckpt, "seq")},
			{"read anything", redisDo("GET", "x")},
			{"run a script", redisDo("EVAL", "return 1", 0)},
		},
	}
	for user, list := range cases {
		t.Run(user, func(t *testing.T) {
			c := rs.client(user, secPassword(t, "redis", user))
			defer c.Close()
			if err := c.Ping(ctx).Err(); err != nil {
				t.Fatalf("%s logs in: %v", user, err)
			}
			for _, tc := range list {
				secRedisErr(t, user, tc.what, tc.op(ctx, c))
			}
		})
	}

	// Nothing was changed by the refused operations.
	if v, err := win.HGet(ctx, ckpt, "seq").Result(); err != nil || v != "1" {
		t.Fatalf("checkpoint seq = %q, %v; want 1", v, err)
	}
	admin := rs.client("admin", secPassword(t, "redis", "admin"))
	defer admin.Close()
	if v, err := admin.HGet(ctx, claims, e1).Result(); err != nil || v != "\x00\x00\x00\x00\x00\x00\x00\x01" {
		t.Fatalf("claim of e1 = %q, %v; want fingerprint 1", v, err)
	}
	if n, err := admin.DBSize(ctx).Result(); err != nil || n != 2 {
		t.Fatalf("%d keys (%v), want the checkpoint and the claims only", n, err)
	}
}
