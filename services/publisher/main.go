// Command publisher merges window partials into snapshots and writes them
// to the KV bucket by revision compare-and-set (docs/spec.md §4 and §5).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/receiptflow/receiptflow/pkg/daemon"
	"github.com/receiptflow/receiptflow/pkg/publisher"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := daemon.Main(ctx, "publisher", os.Args[1:], os.Stderr, func(d *daemon.Deps) (daemon.Runner, error) {
		return publisher.New(d.NATS.JS, d.Store, publisher.Config{
			Names: d.Names, Partitions: d.Common.Partitions, Grace: d.Common.Grace, StaleAfter: d.Common.StaleAfter,
			Linger: d.Common.Waits().PublishLinger, Logger: d.Logger, Registerer: d.Registerer, Failpoints: d.Failpoints,
			WindowRetention: d.Common.WindowRetention, DayRetention: d.Common.DayRetention,
		}), nil
	})
	stop()
	os.Exit(code)
}
