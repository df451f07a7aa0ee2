// Command windower applies VALID to the window state in Redis and writes
// LATE and CHANGES (docs/spec.md §3 and §4).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/receiptflow/receiptflow/pkg/daemon"
	"github.com/receiptflow/receiptflow/pkg/windower"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := daemon.Main(ctx, "windower", os.Args[1:], os.Stderr, func(d *daemon.Deps) (daemon.Runner, error) {
		return windower.New(d.NATS.JS, d.Store, windower.Config{
			Names: d.Names, Partitions: d.Common.Partitions, Owned: d.Owned,
			Logger: d.Logger, Registerer: d.Registerer, Failpoints: d.Failpoints,
			Linger: d.Common.Waits().ConsumeLinger,
		}), nil
	})
	stop()
	os.Exit(code)
}
