// Command windower applies VALID to the window state in Redis and writes
// LATE and CHANGES (docs/spec.md §3 and §4).
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
	code := daemon.Command(ctx, "windower", os.Args[1:], os.Stderr, daemon.Build)
	stop()
	os.Exit(code)
}
