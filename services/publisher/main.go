// Command publisher merges window partials into snapshots and writes them
// to the KV bucket by revision compare-and-set (docs/spec.md §4 and §5).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/receiptflow/receiptflow/pkg/daemon"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := daemon.Command(ctx, "publisher", os.Args[1:], os.Stderr, daemon.Build)
	stop()
	os.Exit(code)
}
