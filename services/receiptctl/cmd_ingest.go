package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/config"
	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/ingest"
	"github.com/receiptflow/receiptflow/pkg/pipeline"
	"github.com/receiptflow/receiptflow/pkg/stream"
)

func cmdIngest(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ingest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config.Common
	c.Register(fs)
	var natsSec pipeline.NATSSecurity
	natsSec.Register(fs)
	events := fs.String("events", "", "NDJSON file of events (required; - for stdin)")
	hbEvery := fs.Int("heartbeat-every", 1000, "send a progress heartbeat to every partition after this many records")
	eos := fs.Bool("end-of-stream", false, "after the file, send the end-of-stream watermark (closes every window)")
	ensure := fs.Bool("ensure-streams", envBool("RECEIPTS_ENSURE_STREAMS", true),
		"create the streams and buckets if RAW does not exist yet (env RECEIPTS_ENSURE_STREAMS); needs admin rights. When RAW exists ingest only looks it up, so the least-privilege ingest user needs no create rights")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *events == "" {
		return usageError("--events is required")
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
	v, err := contract.NewValidator(contract.Options{})
	if err != nil {
		return err
	}
	in := ingest.New(conn.JS, ingest.Options{Partitions: c.Partitions, HotKeys: c.Hot(), Validator: v, HeartbeatEvery: *hbEvery, EndOfStream: *eos})
	began := time.Now()
	st, err := ingest.File(ctx, in, r, func(s ingest.Stats) {
		fmt.Fprintf(stderr, "ingest: %d records, %d published, %d duplicates\n", s.Records, s.Published, s.Duplicates)
	})
	if err != nil {
		return explainRefusal(err, refusals, natsSec)
	}
	fmt.Fprintf(stdout, "ingest: %d records (%d invalid-looking, %d dropped by JetStream as duplicates), %d heartbeats in %.2fs\n",
		st.Records, st.Invalid, st.Duplicates, st.Heartbeats, time.Since(began).Seconds())
	return nil
}

// setupHint tells the operator how the streams come to exist in a
// least-privilege deployment.
const setupHint = "run the set-up job first: a service binary with --ensure-only as the NATS admin user, " +
	"e.g. validator --ensure-only --nats-user admin --nats-password-file F (docs/deployment.md)"

// rawReady makes sure the RAW stream exists before anything is published
// to it. It looks RAW up ($JS.API.STREAM.INFO.RAW, which the ingest user
// may ask) and, only if it is missing and ensure is set, creates the
// streams and buckets as before (embedded and unsecured set-ups, admin).
// A missing RAW that cannot be created is an error naming the set-up job.
func rawReady(ctx context.Context, js jetstream.JetStream, refusals *pipeline.Refusals, c config.Common, sec pipeline.NATSSecurity, ensure bool) error {
	lookCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	lookCtx, stop := refusals.Context(lookCtx)
	defer stop()
	_, err := js.Stream(lookCtx, stream.Raw)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, jetstream.ErrStreamNotFound):
		if !ensure {
			return fmt.Errorf("stream %s does not exist (--ensure-streams=false): %s", stream.Raw, setupHint)
		}
	default:
		return explainRefusal(fmt.Errorf("look up stream %s: %w", stream.Raw, err), refusals, sec)
	}
	if err := stream.Ensure(lookCtx, js, stream.For(c.Generation), stream.Config{Partitions: c.Partitions}); err != nil {
		if refused := refusals.Err(); refused != nil {
			return fmt.Errorf("stream %s does not exist, and %s may not create it (%v): %s", stream.Raw, who(sec), refused, setupHint)
		}
		return fmt.Errorf("stream %s does not exist and creating it failed: %w (%s)", stream.Raw, err, setupHint)
	}
	return nil
}

// connectOperator connects a receiptctl command to a running deployment
// with the credentials and TLS settings of sec (the services' flags), and
// records the server's refusals. A refused login says which flags supply
// the credentials.
func connectOperator(url, name string, sec pipeline.NATSSecurity) (*pipeline.Conn, *pipeline.Refusals, error) {
	opts, err := sec.Options()
	if err != nil {
		return nil, nil, err
	}
	refusals := pipeline.NewRefusals()
	conn, err := pipeline.ConnectNATS(url, name, append(opts, refusals.Option())...)
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
func explainRefusal(err error, refusals *pipeline.Refusals, sec pipeline.NATSSecurity) error {
	refused := refusals.Err()
	if refused == nil || errors.Is(err, nats.ErrPermissionViolation) {
		return err
	}
	return fmt.Errorf("%w (%s was refused: %v; see its permissions in deploy/nats/auth.conf)", err, who(sec), refused)
}

// who names the NATS principal of sec for messages.
func who(sec pipeline.NATSSecurity) string {
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
