// Command validator reads RAW and writes VALID or REJECTED (docs/spec.md §1).
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
	code := daemon.Command(ctx, "validator", os.Args[1:], os.Stderr, daemon.Build)
	stop()
	os.Exit(code)
}
