package stream

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// TestEnsureConcurrentDifferentConfigs: services and a set-up job may call
// Ensure at the same moment with different settings (here the duplicate
// window); every call succeeds, none with "stream name already in use".
func TestEnsureConcurrentDifferentConfigs(t *testing.T) {
	_, url := testenv.NATS(t)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for g := 2; g < 30; g++ {
		n := wire.For(strconv.Itoa(g))
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i := range errs {
			wg.Go(func() {
				errs[i] = Ensure(ctx, js, n, Config{Partitions: 2, DupWindow: time.Duration(i+1) * time.Minute})
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("generation %d, Ensure %d: %v", g, i, err)
			}
		}
	}
	s, err := js.Stream(ctx, wire.For("2").Stream(wire.Late))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().Config.MaxAge; got != DefaultMaxAge {
		t.Errorf("LATE kept for %v, want the default %v", got, DefaultMaxAge)
	}
}
