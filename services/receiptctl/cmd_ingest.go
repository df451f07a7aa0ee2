package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

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
	events := fs.String("events", "", "NDJSON file of events (required; - for stdin)")
	hbEvery := fs.Int("heartbeat-every", 1000, "send a progress heartbeat to every partition after this many records")
	eos := fs.Bool("end-of-stream", false, "after the file, send the end-of-stream watermark (closes every window)")
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
	conn, err := pipeline.ConnectNATS(c.NATSURL, "receiptctl-ingest")
	if err != nil {
		return err
	}
	defer conn.NC.Drain()
	if err := stream.Ensure(ctx, conn.JS, stream.For(c.Generation), stream.Config{Partitions: c.Partitions}); err != nil {
		return err
	}
	v, err := contract.NewValidator(contract.Options{})
	if err != nil {
		return err
	}
	in := ingest.New(conn.JS, ingest.Options{Partitions: c.Partitions, Validator: v, HeartbeatEvery: *hbEvery, EndOfStream: *eos})
	began := time.Now()
	st, err := ingest.File(ctx, in, r, func(s ingest.Stats) {
		fmt.Fprintf(stderr, "ingest: %d records, %d published, %d duplicates\n", s.Records, s.Published, s.Duplicates)
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "ingest: %d records (%d invalid-looking, %d dropped by JetStream as duplicates), %d heartbeats in %.2fs\n",
		st.Records, st.Invalid, st.Duplicates, st.Heartbeats, time.Since(began).Seconds())
	return nil
}
