package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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
	srcs, err := readSources(ctx, conn.JS, n)
	if err != nil {
		return err
	}
	writeSources(stdout, srcs, time.Now())
	return nil
}

// sourcesReport is the publisher's meta.sources (docs/spec.md §3.1).
type sourcesReport struct {
	Live       int                     `json:"live"`
	Partitions []wire.PartitionSources `json:"partitions"`
}

// readSources reads generation n's meta.sources; nil when the publisher
// has written none yet.
func readSources(ctx context.Context, js jetstream.JetStream, n wire.Names) (*sourcesReport, error) {
	kv, err := js.KeyValue(ctx, n.Bucket())
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("status: bucket %s: %w", n.Bucket(), err)
	}
	e, err := kv.Get(ctx, "meta.sources")
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("status: %s meta.sources: %w", n.Bucket(), err)
	}
	var r sourcesReport
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return nil, fmt.Errorf("status: %s meta.sources: %w", n.Bucket(), err)
	}
	return &r, nil
}

// writeSources writes the sources live in each partition, with their
// progress and the age of their last message there.
func writeSources(w io.Writer, r *sourcesReport, now time.Time) {
	if r == nil {
		fmt.Fprintf(w, "\nsources: not reported yet (the publisher writes them)\n")
		return
	}
	fmt.Fprintf(w, "\nsources: %d live\n", r.Live)
	var rows [][]string
	for _, p := range r.Partitions {
		for _, s := range p.Sources {
			if !s.Live {
				continue
			}
			id := s.ID
			if id == wire.SourceLegacy {
				id = "(no id)"
			}
			rows = append(rows, []string{strconv.Itoa(p.Partition), id, s.Progress.UTC().Format(time.RFC3339), now.Sub(s.LastSeen).Round(time.Second).String()})
		}
	}
	if len(rows) > 0 {
		_ = writeAligned(w, []string{"partition", "source", "progress", "last_message_age"}, rows)
	}
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
