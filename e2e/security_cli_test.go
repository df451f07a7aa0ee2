package e2e

// The operator's command line against the secured deployment (issue 6):
// the built receiptctl binary, run against the servers of
// security_servers_test.go (deploy/nats/nats.conf, deploy/redis/redis.conf
// and their users), logs in with the services' credential flags.
//
//   - TestSecurityCLIIngestAsIngestUser: receiptctl ingest as the ingest
//     user stores every record in RAW without any right to create streams;
//     before the set-up job it fails saying so and creates nothing; without
//     credentials, with a wrong password or as a user without RAW rights it
//     fails with a message naming the cause and stores nothing; the ingest
//     user still cannot create, update, purge or delete a stream.
//   - TestSecurityCLIReplayAsOperator: receiptctl replay of RAW and of
//     VALID as the operator (NATS admin, Redis admin) re-drives every
//     message through the running services, which change no window; without
//     credentials, as the ingest user or without Redis credentials it is
//     refused and re-drives nothing.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/pipeline"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// secCLIBinary builds services/receiptctl into a directory of t's and
// returns the binary's path.
func secCLIBinary(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("go", "build", "-o", dir+"/", "github.com/receiptflow/receiptflow/services/receiptctl").CombinedOutput()
	if err != nil {
		t.Fatalf("go build receiptctl: %v\n%s", err, out)
	}
	return filepath.Join(dir, "receiptctl")
}

// secCLIResult is one receiptctl run.
type secCLIResult struct {
	code           int
	stdout, stderr string
}

func (r secCLIResult) String() string {
	return fmt.Sprintf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
}

// secCLI runs bin with args and env added to an environment cleared of
// every NATS_*, REDIS_* and RECEIPTS_* variable of the test's own.
func secCLI(t testing.TB, bin string, env []string, args ...string) secCLIResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NATS_") && !strings.HasPrefix(kv, "REDIS_") && !strings.HasPrefix(kv, "RECEIPTS_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	res := secCLIResult{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		res.code = ee.ExitCode()
	default:
		t.Fatalf("receiptctl %s: %v", strings.Join(args, " "), err)
	}
	t.Logf("receiptctl %s: exit %d; %s%s", args[0], res.code, strings.TrimSpace(res.stdout), strings.TrimSpace(res.stderr))
	return res
}

// secCLIFails checks that res failed with exit code 1 and a message
// holding every one of want.
func secCLIFails(t testing.TB, what string, res secCLIResult, want ...string) {
	t.Helper()
	if res.code != 1 {
		t.Fatalf("%s: want exit 1, got %s", what, res)
	}
	for _, w := range want {
		if !strings.Contains(res.stderr, w) {
			t.Fatalf("%s: the message lacks %q:\n%s", what, w, res.stderr)
		}
	}
}

// secStreamMsgs returns the number of messages stored in each stream
// (absent streams are missing from the map), read as admin.
func secStreamMsgs(t testing.TB, js jetstream.JetStream) map[string]uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := map[string]uint64{}
	l := js.ListStreams(ctx)
	for info := range l.Info() {
		out[info.Config.Name] = info.State.Msgs
	}
	if err := l.Err(); err != nil {
		t.Fatalf("list streams: %v", err)
	}
	return out
}

// secValidRecords is how many records VALID's frames hold.
func secValidRecords(t testing.TB, js jetstream.JetStream) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := 0
	if err := stream.ReadValid(ctx, js, wire.Valid, func(stream.ValidRecord) error { n++; return nil }); err != nil {
		t.Fatalf("read VALID: %v", err)
	}
	return n
}

// secRawRecords reads RAW as admin and returns the event ids of its
// records (heartbeats left out), sorted, and the number of heartbeats.
func secRawRecords(t testing.TB, js jetstream.JetStream) ([]string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var ids []string
	beats := 0
	err := stream.ReadAll(ctx, js, wire.Raw, func(m jetstream.Msg) error {
		if m.Headers().Get(wire.HdrHeartbeat) != "" {
			beats++
			return nil
		}
		id, _, _ := strings.Cut(m.Headers().Get(jetstream.MsgIDHeader), ":")
		ids = append(ids, id)
		return nil
	})
	if err != nil {
		t.Fatalf("read RAW: %v", err)
	}
	sort.Strings(ids)
	return ids, beats
}

// secWriteEvents writes n distinct valid v2 submissions and returns the
// file and their event ids, sorted.
func secWriteEvents(t testing.TB, n int) (string, []string) {
	t.Helper()
	var buf bytes.Buffer
	var ids []string
	start := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("cli-%04d", i)
		ids = append(ids, id)
		fmt.Fprintf(&buf, `{"schema_version":2,"event_id":%q,"receipt_id":"r-%d","type":"submitted","occurred_at":%q,"partition_key":"store-%d","producer_version":"cli-test"}`+"\n",
			id, i, start.Add(time.Duration(i)*time.Minute).Format(time.RFC3339), i%13)
	}
	path := filepath.Join(t.TempDir(), "events.ndjson")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	sort.Strings(ids)
	return path, ids
}

func TestSecurityCLIIngestAsIngestUser(t *testing.T) {
	bin := secCLIBinary(t)
	_, url := secNATS(t)
	admin := secConnect(t, url, "admin")
	events, wantIDs := secWriteEvents(t, 60)
	asIngest := []string{"--nats-user", "ingest", "--nats-password-file", secPasswordFile("nats", "ingest")}
	ingestArgs := func(extra ...string) []string {
		return append([]string{"ingest", "--events", events, "--nats-url", url, "--partitions", "8"}, extra...)
	}

	// Before the set-up job: the ingest user may look RAW up but not
	// create it; the CLI says what to do and nothing is created.
	res := secCLI(t, bin, nil, ingestArgs(asIngest...)...)
	secCLIFails(t, "ingest before the set-up job", res,
		"stream RAW does not exist", `user "ingest" may not create it`,
		`Permissions Violation for Publish to "$JS.API.STREAM.UPDATE.RAW"`, "--ensure-only")
	res = secCLI(t, bin, nil, ingestArgs(append(asIngest, "--ensure-streams=false")...)...)
	secCLIFails(t, "ingest before the set-up job, --ensure-streams=false", res,
		"stream RAW does not exist (--ensure-streams=false)", "--ensure-only")
	if got := secStreamMsgs(t, admin.JS); len(got) != 0 {
		t.Fatalf("the ingest user's attempts left streams behind: %v", got)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	secSetup(t, ctx, url, 1)

	// Refused logins and principals: nothing reaches RAW.
	wrong := filepath.Join(t.TempDir(), "wrong.password")
	if err := os.WriteFile(wrong, []byte("not-the-password\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what string
		env  []string
		args []string
		want []string
	}{
		{"no credentials", nil, nil,
			[]string{"Authorization Violation", "an anonymous client", "--nats-user", "--nats-password-file"}},
		{"wrong password", nil, []string{"--nats-user", "ingest", "--nats-password-file", wrong},
			[]string{"Authorization Violation", `the server refused user "ingest"`}},
		{"user without a password", nil, []string{"--nats-user", "ingest"},
			[]string{`password of user "ingest"`, "no password given"}},
		{"missing password file", nil, []string{"--nats-user", "ingest", "--nats-password-file", filepath.Join(t.TempDir(), "absent")},
			[]string{`password of user "ingest"`, "no such file"}},
		{"a user without rights on RAW", nil, []string{"--nats-user", "dashboard", "--nats-password-file", secPasswordFile("nats", "dashboard")},
			[]string{"look up stream RAW", `user "dashboard" was refused`, `Permissions Violation for Publish to "$JS.API.STREAM.INFO.RAW"`, "deploy/nats/auth.conf"}},
		{"wrong password from the environment", []string{"NATS_USER=ingest", "NATS_PASSWORD=wrong"}, nil,
			[]string{"Authorization Violation", `the server refused user "ingest"`}},
	} {
		secCLIFails(t, c.what, secCLI(t, bin, c.env, ingestArgs(c.args...)...), c.want...)
	}
	if got := secStreamMsgs(t, admin.JS)[wire.Raw]; got != 0 {
		t.Fatalf("refused ingests stored %d messages in RAW", got)
	}

	// As the ingest user: every record lands in RAW, plus the closing
	// heartbeat on each of the 8 partitions.
	res = secCLI(t, bin, nil, ingestArgs(asIngest...)...)
	if res.code != 0 || !strings.Contains(res.stdout, "ingest: 60 records (0 invalid-looking, 0 dropped by JetStream as duplicates), 1 heartbeats") {
		t.Fatalf("ingest as the ingest user: %s", res)
	}
	ids, beats := secRawRecords(t, admin.JS)
	if strings.Join(ids, ",") != strings.Join(wantIDs, ",") || beats != 8 {
		t.Fatalf("RAW holds %d records (%d heartbeats), want the file's %d records and 8 heartbeats", len(ids), beats, len(wantIDs))
	}

	// Again, with the credentials from the environment (docs/deployment.md):
	// JetStream drops every message as a duplicate, RAW does not grow.
	res = secCLI(t, bin, []string{"NATS_USER=ingest", "NATS_PASSWORD_FILE=" + secPasswordFile("nats", "ingest")}, ingestArgs()...)
	if res.code != 0 || !strings.Contains(res.stdout, "ingest: 60 records (0 invalid-looking, 68 dropped by JetStream as duplicates)") {
		t.Fatalf("ingest again as the ingest user from the environment: %s", res)
	}
	if got := secStreamMsgs(t, admin.JS)[wire.Raw]; got != 68 {
		t.Fatalf("RAW holds %d messages after the repeated ingest, want 68", got)
	}

	// The ingest user still cannot change the topology.
	in := secConnect(t, url, "ingest")
	for _, c := range []secNATSCase{
		{"create a stream", "$JS.API.STREAM.CREATE.EVIL", func(ctx context.Context, c *secConn) error {
			_, err := c.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "EVIL", Subjects: []string{"evil.>"}})
			return err
		}},
		{"recreate RAW", "$JS.API.STREAM.CREATE.RAW", func(ctx context.Context, c *secConn) error {
			_, err := c.JS.CreateStream(ctx, jetstream.StreamConfig{Name: wire.Raw, Subjects: []string{"rf.raw.*"}})
			return err
		}},
		{"update RAW", "$JS.API.STREAM.UPDATE.RAW", func(ctx context.Context, c *secConn) error {
			_, err := c.JS.UpdateStream(ctx, jetstream.StreamConfig{Name: wire.Raw, Subjects: []string{"rf.raw.*"}, MaxMsgs: 1})
			return err
		}},
		{"purge RAW", "$JS.API.STREAM.PURGE.RAW", apiRequest("$JS.API.STREAM.PURGE.RAW")},
		{"delete RAW", "$JS.API.STREAM.DELETE.RAW", func(ctx context.Context, c *secConn) error { return c.JS.DeleteStream(ctx, wire.Raw) }},
		{"delete VALID", "$JS.API.STREAM.DELETE.VALID", func(ctx context.Context, c *secConn) error { return c.JS.DeleteStream(ctx, wire.Valid) }},
		{"look VALID up", "$JS.API.STREAM.INFO.VALID", func(ctx context.Context, c *secConn) error { _, err := c.JS.Stream(ctx, wire.Valid); return err }},
	} {
		in.refused(t, c.what, c.subject, func(ctx context.Context) error { return c.op(ctx, in) })
	}
	got := secStreamMsgs(t, admin.JS)
	var names []string
	for n := range got {
		names = append(names, n)
	}
	sort.Strings(names)
	if strings.Join(names, " ") != "CHANGES KV_receipts KV_receipts-1 KV_receipts-leases-1 LATE RAW REJECTED VALID" || got[wire.Raw] != 68 {
		t.Fatalf("after the refusals the streams are %v (RAW %d messages), want the set-up job's with RAW at 68", names, got[wire.Raw])
	}
}

func TestSecurityCLIReplayAsOperator(t *testing.T) {
	bin := secCLIBinary(t)
	events := secGenerate(t, 800, 19)
	rs := secRedisServer(t)
	_, url := secNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	secSetup(t, ctx, url, 1)
	admin := secConnect(t, url, "admin")

	svcCtx, stopServices := secServiceContext()
	defer stopServices()
	procs := []*secProc{
		secStartService(t, svcCtx, "validator", "validator", secServiceArgs("validator", url, rs.url())),
		secStartService(t, svcCtx, "windower", "windower", secServiceArgs("windower", url, rs.url())),
		secStartService(t, svcCtx, "publisher", "publisher", secServiceArgs("publisher", url, rs.url())),
	}

	res := secCLI(t, bin, []string{"NATS_USER=ingest", "NATS_PASSWORD_FILE=" + secPasswordFile("nats", "ingest")},
		"ingest", "--events", events, "--nats-url", url, "--partitions", "8", "--end-of-stream")
	if res.code != 0 {
		t.Fatalf("ingest as the ingest user: %s", res)
	}
	secWaitDrained(t, ctx, admin.JS, 8+8+1, 60*time.Second)
	before, err := pipeline.ReadWindows(ctx, admin.JS, wire.For(""))
	if err != nil || len(before) == 0 {
		t.Fatalf("windows after ingest: %d, %v", len(before), err)
	}
	// receiptctl windows reads the bucket with the dashboard user's
	// read-only rights: every window the publisher wrote, and the day
	// rollups; the ingest user has no rights on the bucket.
	asDashboard := []string{"NATS_USER=dashboard", "NATS_PASSWORD_FILE=" + secPasswordFile("nats", "dashboard")}
	res = secCLI(t, bin, asDashboard, "windows", "--nats-url", url, "--from", "2000-01-01", "--format", "json")
	var hours []struct {
		WindowID string `json:"window_id"`
		Count    int64  `json:"count"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &hours); res.code != 0 || err != nil || len(hours) != len(before) {
		t.Fatalf("windows as the dashboard user: %d hours for %d windows (%v): %s", len(hours), len(before), err, res)
	}
	if res = secCLI(t, bin, asDashboard, "windows", "--nats-url", url, "--from", "2000-01-01", "--by", "day", "--format", "csv"); res.code != 0 || strings.Count(res.stdout, "\n") < 2 {
		t.Fatalf("windows --by day as the dashboard user: %s", res)
	}
	secCLIFails(t, "windows as the ingest user", secCLI(t, bin, []string{"NATS_USER=ingest", "NATS_PASSWORD_FILE=" + secPasswordFile("nats", "ingest")},
		"windows", "--nats-url", url, "--from", "2000-01-01"), "Permissions Violation")

	counts := secStreamMsgs(t, admin.JS)
	raw, valid, rejected := counts[wire.Raw], counts[wire.Valid], counts[wire.Rejected]
	validRecs := secValidRecords(t, admin.JS)
	if raw == 0 || valid == 0 || rejected == 0 {
		t.Fatalf("streams after ingest: %v", counts)
	}

	asAdmin := []string{"--nats-url", url, "--nats-user", "admin", "--nats-password-file", secPasswordFile("nats", "admin")}
	redisAdmin := []string{"--redis-url", rs.url(), "--redis-user", "admin", "--redis-password-file", secPasswordFile("redis", "admin")}
	replayArgs := func(which string, extra ...string) []string {
		return append([]string{"replay", "--stream", which, "--from-seq", "1", "--partitions", "8"}, extra...)
	}

	// Refused: nothing is re-driven.
	secCLIFails(t, "replay without credentials", secCLI(t, bin, nil, replayArgs("VALID", "--nats-url", url)...),
		"Authorization Violation", "an anonymous client", "--nats-user")
	secCLIFails(t, "replay as the ingest user", secCLI(t, bin, nil,
		replayArgs("VALID", "--nats-url", url, "--nats-user", "ingest", "--nats-password-file", secPasswordFile("nats", "ingest"))...),
		`user "ingest" was refused`, `Permissions Violation for Publish to "$JS.API.STREAM.INFO.VALID"`)
	secCLIFails(t, "replay of RAW without Redis credentials", secCLI(t, bin, nil,
		replayArgs("RAW", append(asAdmin, "--redis-url", rs.url())...)...),
		"redis redis://", "NOAUTH", "--redis-user")
	secCLIFails(t, "replay of RAW as a Redis user without claims rights", secCLI(t, bin, nil,
		replayArgs("RAW", append(asAdmin, "--redis-url", rs.url(), "--redis-user", "publisher", "--redis-password-file", secPasswordFile("redis", "publisher"))...)...),
		"NOPERM")
	if got := secStreamMsgs(t, admin.JS); got[wire.Valid] != valid || got[wire.Rejected] != rejected {
		t.Fatalf("refused replays changed the streams: %v, was VALID %d REJECTED %d", got, valid, rejected)
	}

	// RAW as the operator: every message goes through the validator logic
	// again, each output stored once more under a new message id, and the
	// running services change no window.
	res = secCLI(t, bin, nil, replayArgs("RAW", append(asAdmin, redisAdmin...)...)...)
	if want := fmt.Sprintf("re-drove RAW 1..%d (%d messages)", raw, raw); res.code != 0 || !strings.Contains(res.stdout, want) {
		t.Fatalf("replay RAW as admin: want %q, got %s", want, res)
	}
	// Every rejection is stored again under its tagged id (the claims in
	// Redis, as admin, found the conflicting duplicates again).
	counts = secStreamMsgs(t, admin.JS)
	validAfterRaw := counts[wire.Valid]
	// Replayed outputs carry tagged message ids: stored again, not
	// dropped as duplicates, and changing nothing downstream.
	// (VALID's frames follow the replay's batches: its records, not its
	// messages, are doubled.)
	if got := secValidRecords(t, admin.JS); counts[wire.Rejected] != 2*rejected || counts[wire.Raw] != raw || got != 2*validRecs {
		t.Fatalf("after the RAW replay: %v and %d VALID records, want REJECTED %d, RAW %d, VALID records %d", counts, got, 2*rejected, raw, 2*validRecs)
	}
	secWaitDrained(t, ctx, admin.JS, 8+8+1, 60*time.Second)
	after, err := pipeline.ReadWindows(ctx, admin.JS, wire.For(""))
	if err != nil {
		t.Fatal(err)
	}
	secSameWindows(t, after, before)

	// VALID as the operator (NATS only): the first VALID messages again.
	res = secCLI(t, bin, nil, replayArgs("VALID", append(asAdmin, "--to-seq", fmt.Sprint(valid))...)...)
	if want := fmt.Sprintf("re-drove VALID 1..%d (%d messages)", valid, valid); res.code != 0 || !strings.Contains(res.stdout, want) {
		t.Fatalf("replay VALID as admin: want %q, got %s", want, res)
	}
	if got := secStreamMsgs(t, admin.JS)[wire.Valid]; got != validAfterRaw+valid {
		t.Fatalf("VALID holds %d after the VALID replay, want %d", got, validAfterRaw+valid)
	}
	secWaitDrained(t, ctx, admin.JS, 8+8+1, 60*time.Second)
	after, err = pipeline.ReadWindows(ctx, admin.JS, wire.For(""))
	if err != nil {
		t.Fatal(err)
	}
	secSameWindows(t, after, before)
	t.Logf("%d windows unchanged after the operator's replays of RAW (%d messages) and VALID (1..%d)", len(after), raw, valid)

	stopServices()
	for _, p := range procs {
		<-p.done
		if strings.Contains(p.log.String(), "nats refused an operation") {
			t.Errorf("%s was refused by NATS:\n%s", p.name, p.log.String())
		}
	}
}
