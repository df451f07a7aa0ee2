// Command validator reads RAW and writes VALID or REJECTED (docs/spec.md §1).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/receiptflow/receiptflow/pkg/daemon"
	"github.com/receiptflow/receiptflow/pkg/validator"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := daemon.Main(ctx, "validator", os.Args[1:], os.Stderr, func(d *daemon.Deps) (daemon.Runner, error) {
		return validator.New(d.NATS.JS, d.Store, validator.Config{
			Names: d.Names, Partitions: d.Common.Partitions, HotKeys: d.Common.Hot(), Owned: d.Owned, Validator: d.Validator,
			Logger: d.Logger, Registerer: d.Registerer, Failpoints: d.Failpoints,
			IdleEvery: d.Common.Waits().BarrierIdle, BarrierPoll: d.Common.Waits().BarrierPoll,
			Linger: d.Common.Waits().ConsumeLinger,
		}), nil
	})
	stop()
	os.Exit(code)
}
