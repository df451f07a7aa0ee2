package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/generation"
	"github.com/receiptflow/receiptflow/pkg/lease"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// cmdStatus lists the live validator and windower instances of a
// generation's groups (docs/spec.md §9): each one's partitions and lease
// age, read from the lease bucket, and the partitions nobody holds.
func cmdStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	natsURL := fs.String("nats-url", os.Getenv("NATS_URL"), "NATS server URL of the deployment (env NATS_URL)")
	gen := fs.String("generation", "", "generation to show (default: the active one)")
	partitions := fs.Int("partitions", 0, "partition count, to list the partitions nobody holds (default: the deployment's record)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *natsURL == "" {
		return usageError("--nats-url (or NATS_URL) is required: status reads a running deployment")
	}
	if err := connect.CheckNATSURL(*natsURL); err != nil {
		return usageError("--nats-url %v", err)
	}
	conn, err := connect.ConnectNATS(*natsURL, "receiptctl-status")
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if *gen == "" {
		p, _, err := generation.Active(ctx, conn.JS)
		if err != nil {
			return err
		}
		*gen = p.Generation
	}
	n := wire.For(*gen)
	if *partitions == 0 {
		*partitions = recordedPartitions(ctx, conn, n)
	}
	v, err := lease.Read(ctx, conn.JS, n.LeaseBucket())
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "generation %s, lease bucket %s\n", n.Generation, n.LeaseBucket())
	writeStatus(stdout, v, *partitions, time.Now())
	return nil
}

// recordedPartitions returns generation n's recorded partition count, 0
// when there is none.
func recordedPartitions(ctx context.Context, conn *connect.Conn, n wire.Names) int {
	md, err := stream.RawMetadata(ctx, conn.JS)
	if err != nil {
		return 0
	}
	p, _ := strconv.Atoi(md[n.ParamKey("partitions")])
	return p
}

// writeStatus writes v as a table per group: member, partitions, lease
// age (since its oldest lease was taken), last renewal; then the
// partitions (of 0..partitions-1, when known) that nobody holds.
func writeStatus(w io.Writer, v lease.View, partitions int, now time.Time) {
	for _, kind := range []string{"validator", "windower"} {
		var rows [][]string
		for _, m := range v.Members {
			if m.Kind != kind {
				continue
			}
			ps := v.Of(kind, m.ID)
			var oldest time.Duration
			for _, l := range v.Leases {
				if l.Kind == kind && l.Holder == m.ID {
					oldest = max(oldest, now.Sub(l.Acquired))
				}
			}
			age := "-"
			if len(ps) > 0 {
				age = oldest.Round(time.Second).String()
			}
			rows = append(rows, []string{m.ID, intList(ps), age, now.Sub(m.Renewed).Round(100*time.Millisecond).String() + " ago", m.Info})
		}
		fmt.Fprintf(w, "\n%s: %d live in the group\n", kind, len(rows))
		if len(rows) > 0 {
			_ = writeAligned(w, []string{"instance", "partitions", "lease_age", "renewed", "http"}, rows)
		}
		held := map[int]bool{}
		for _, l := range v.Leases {
			if l.Kind == kind {
				held[l.Partition] = true
			}
		}
		var free []int
		for p := 0; p < partitions; p++ {
			if !held[p] {
				free = append(free, p)
			}
		}
		if len(free) > 0 {
			fmt.Fprintf(w, "  not held by a group member: %s (served by --instance/--instances processes, or waiting for a member)\n", intList(free))
		}
	}
}

// intList writes ps as 0,2,5 ("-" when empty).
func intList(ps []int) string {
	if len(ps) == 0 {
		return "-"
	}
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ",")
}
