package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/config"
	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/ingest"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

func cmdIngest(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ingest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config.Common
	c.Register(fs)
	var natsSec connect.NATSSecurity
	natsSec.Register(fs)
	events := fs.String("events", "", "NDJSON file of events (required; - for stdin)")
	c.RegisterHeartbeat(fs, "send a progress heartbeat to every partition after this many records")
	eos := fs.Bool("end-of-stream", false, "after the file, send the end-of-stream watermark (closes every window)")
	sourceID := fs.String("source-id", "", "this run's id as a source of RAW (docs/spec.md §3.1; default the host name and the file's absolute path, host:/path, so a file run again after a failure continues its source)")
	beatEvery := fs.Duration("heartbeat-interval", 0, "also send a progress heartbeat this long after the last one while records keep coming (0: only every --heartbeat-every records)")
	ensure := fs.Bool("ensure-streams", envBool("RECEIPTS_ENSURE_STREAMS", true),
		"create the streams and buckets if RAW does not exist yet (env RECEIPTS_ENSURE_STREAMS); needs admin rights. When RAW exists ingest only looks it up, so the least-privilege ingest user needs no create rights")
	retryFor := fs.Duration("retry-for", 30*time.Second,
		"how long to keep retrying a batch the broker does not confirm (restarts, leader elections, a full store) before giving up with exit 1, naming the first unconfirmed record; while RAW's leader still answers (a quorum is reachable) the retries go on")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *retryFor <= 0 {
		return usageError("--retry-for must be positive, got %s", *retryFor)
	}
	if *events == "" {
		return usageError("--events is required")
	}
	if *beatEvery < 0 {
		return usageError("--heartbeat-interval must not be negative, got %s", *beatEvery)
	}
	if *sourceID == "" {
		id, err := defaultSourceID(*events)
		if err != nil {
			return err
		}
		*sourceID = id
	}
	if c.NATSURL == "" {
		return usageError("--nats-url (or NATS_URL) is required: ingest publishes to a running deployment")
	}
	if err := c.Validate(); err != nil {
		return usageError("%v", err)
	}
	var r io.Reader = os.Stdin
	if *events != "-" {
		f, err := os.Open(*events)
		if err != nil {
			return err
		}
		defer f.Close()
		r = f
	}
	conn, refusals, err := connectOperator(c.NATSURL, "receiptctl-ingest", natsSec)
	if err != nil {
		return err
	}
	defer conn.NC.Drain()
	if err := rawReady(ctx, conn.JS, refusals, c, natsSec, *ensure); err != nil {
		return err
	}
	// Records are routed by the deployment's partitions and hot keys, and
	// its heartbeat period is what the referee assumes: a flag left out
	// takes the recorded value, one given with another value is refused.
	meta, err := config.Recorded(ctx, conn.JS)
	if err != nil {
		return explainRefusal(err, refusals, natsSec)
	}
	if err := adoptParams(&c.Params, fs, meta, c.Generation); err != nil {
		return err
	}
	v, err := contract.NewValidator(c.Contract())
	if err != nil {
		return err
	}
	in := ingest.New(conn.JS, ingest.Config{Partitions: c.Partitions, HotKeys: c.Hot(), Validator: v, HeartbeatEvery: c.HeartbeatEvery,
		EndOfStream: *eos, RetryFor: *retryFor, Linger: c.Waits().IngestLinger, SourceID: *sourceID, HeartbeatInterval: *beatEvery, WhileQuorum: true})
	began := time.Now()
	st, err := ingest.File(ctx, in, r, func(s ingest.Stats) {
		fmt.Fprintf(stderr, "ingest: %d records, %d published, %d duplicates\n", s.Records, s.Published, s.Duplicates)
	})
	if err != nil {
		// Exit 1 (docs/spec.md §6). File returns nil only when every
		// record is confirmed stored in RAW (docs/spec.md §4); its error
		// names the first record that is not.
		var ue *ingest.UnconfirmedError
		if errors.As(err, &ue) && ue.Line > 0 {
			if stream.StoreFull(err) {
				err = fmt.Errorf("%w; the broker's store is full (docs/alerts.md#receiptflowbrokerstorefull): free space, then", err)
			} else {
				err = fmt.Errorf("%w;", err)
			}
			err = fmt.Errorf("%w publish the file again, whole or from line %d on (what is stored already is dropped as a duplicate)", err, ue.Line)
		}
		return explainRefusal(err, refusals, natsSec)
	}
	fmt.Fprintf(stdout, "ingest: %d records (%d invalid-looking, %d dropped by JetStream as duplicates), %d heartbeats in %.2fs\n",
		st.Records, st.Invalid, st.Duplicates, st.Heartbeats, time.Since(began).Seconds())
	return nil
}

// defaultSourceID is the source id of a run of file events (- for
// standard input): the host name and the file's absolute path.
func defaultSourceID(events string) (string, error) {
	host, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("ingest: no host name for the default --source-id (give one): %w", err)
	}
	if events == "-" {
		return host + ":-", nil
	}
	abs, err := filepath.Abs(events)
	if err != nil {
		return "", fmt.Errorf("ingest: %s: %w", events, err)
	}
	return host + ":" + abs, nil
}

// setupHint tells the operator how the streams come to exist in a
// least-privilege deployment.
const setupHint = "run the set-up job first: a service binary with --ensure-only as the NATS admin user, " +
	"e.g. validator --ensure-only --nats-user admin --nats-password-file F (docs/deployment.md)"

// rawReady makes sure the RAW stream exists, and allows the atomic batches
// ingest writes, before anything is published to it. It looks RAW up
// ($JS.API.STREAM.INFO.RAW, which the ingest user may ask) and, only if it
// is missing or made without AllowAtomicPublish and ensure is set, creates
// or updates the streams and buckets (embedded and unsecured set-ups,
// admin). A RAW that cannot be made ready is an error naming the set-up
// job.
func rawReady(ctx context.Context, js jetstream.JetStream, refusals *connect.Refusals, c config.Common, sec connect.NATSSecurity, ensure bool) error {
	lookCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	lookCtx, stop := refusals.Context(lookCtx)
	defer stop()
	raw, err := js.Stream(lookCtx, wire.Raw)
	switch {
	case err == nil && raw.CachedInfo().Config.AllowAtomicPublish:
		return nil
	case err == nil:
		// RAW made by a version that published without atomic batches:
		// ingest keeps the file's order with them (docs/spec.md §4).
		if !ensure {
			return fmt.Errorf("stream %s does not allow atomic batches, which ingest needs to keep the file's order (--ensure-streams=false): %s", wire.Raw, setupHint)
		}
	case errors.Is(err, jetstream.ErrStreamNotFound):
		if !ensure {
			return fmt.Errorf("stream %s does not exist (--ensure-streams=false): %s", wire.Raw, setupHint)
		}
	default:
		return explainRefusal(fmt.Errorf("look up stream %s: %w", wire.Raw, err), refusals, sec)
	}
	topology := c.Topology(0)
	topology.Record = nil // ingest knows no lateness or grace: the services' set-up records them
	if err := stream.Ensure(lookCtx, js, wire.For(c.Generation), topology); err != nil {
		what, verb := "does not exist", "create it"
		if raw != nil {
			what, verb = "does not allow atomic batches", "update it"
		}
		if refused := refusals.Err(); refused != nil {
			return fmt.Errorf("stream %s %s, and %s may not %s (%v): %s", wire.Raw, what, who(sec), verb, refused, setupHint)
		}
		return fmt.Errorf("stream %s %s and making it ready failed: %w (%s)", wire.Raw, what, err, setupHint)
	}
	return nil
}

// connectOperator connects a receiptctl command to a running deployment
// with the credentials and TLS settings of sec (the services' flags), and
// records the server's refusals. A refused login says which flags supply
// the credentials.
func connectOperator(url, name string, sec connect.NATSSecurity) (*connect.Conn, *connect.Refusals, error) {
	opts, err := sec.Options()
	if err != nil {
		return nil, nil, err
	}
	refusals := connect.NewRefusals()
	conn, err := connect.ConnectNATS(url, name, append(opts, refusals.Option())...)
	if err != nil {
		if errors.Is(err, nats.ErrAuthorization) {
			return nil, nil, fmt.Errorf("%w: the server refused %s; give the credentials with --nats-user and --nats-password-file (or NATS_USER and NATS_PASSWORD_FILE / NATS_PASSWORD), or --nats-creds", err, who(sec))
		}
		return nil, nil, err
	}
	return conn, refusals, nil
}

// explainRefusal adds the server's permissions violation, if there was
// one, to err: the request it refused only timed out.
func explainRefusal(err error, refusals *connect.Refusals, sec connect.NATSSecurity) error {
	refused := refusals.Err()
	if refused == nil || errors.Is(err, nats.ErrPermissionViolation) {
		return err
	}
	return fmt.Errorf("%w (%s was refused: %v; see its permissions in deploy/nats/auth.conf)", err, who(sec), refused)
}

// who names the NATS principal of sec for messages.
func who(sec connect.NATSSecurity) string {
	switch {
	case sec.User != "":
		return "user " + strconv.Quote(sec.User)
	case sec.CredsFile != "":
		return "the user of " + sec.CredsFile
	default:
		return "an anonymous client"
	}
}

func envBool(k string, def bool) bool {
	if b, err := strconv.ParseBool(os.Getenv(k)); err == nil {
		return b
	}
	return def
}
