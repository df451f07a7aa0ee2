// Command ingest is receiptflow's front door (docs/spec.md §10): producers
// POST events to /v1/events on --listen or send NATS requests to
// rf.submit, and get one answer per record once RAW has stored it. Each
// instance is a source of RAW (docs/spec.md §3.1). It needs NATS only.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
