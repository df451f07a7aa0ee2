package stream

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/testenv"
)

// smallStoreServer starts an in-process nats-server whose max_file_store
// is maxStore bytes and returns a JetStream client of it.
func smallStoreServer(t *testing.T, maxStore int64) jetstream.JetStream {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: testenv.FreePort(t), JetStream: true,
		JetStreamMaxStore: maxStore, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	return testenv.JetStream(t, s.ClientURL())
}

// fill publishes 1 KiB messages to subject until the server refuses one,
// and returns the refusal.
func fill(t *testing.T, ctx context.Context, js jetstream.JetStream, subject string) error {
	t.Helper()
	body := make([]byte, 1024)
	for i := 0; i < 10_000; i++ {
		if _, err := js.PublishMsg(ctx, NewMsg(subject, fmt.Sprintf("%s-%d", subject, i), body)); err != nil {
			return err
		}
	}
	t.Fatalf("%s: 10000 messages of 1 KiB stored", subject)
	return nil
}

// TestStoreFullAnswers holds StoreFull against what a real server answers
// when a store is full: a DiscardNew stream at its max_bytes or max_msgs
// (10077), and the server's max_file_store used up (10023) for plain,
// asynchronous and atomic batch publishes and KV writes alike. Other
// refusals are not StoreFull.
func TestStoreFullAnswers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js := smallStoreServer(t, 256<<10)
	code := func(err error) string {
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) {
			return fmt.Sprintf("%d %q", apiErr.ErrorCode, apiErr.Description)
		}
		return fmt.Sprintf("%T %v", err, err)
	}
	mustStream := func(cfg jetstream.StreamConfig) {
		t.Helper()
		if _, err := js.CreateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}

	mustStream(jetstream.StreamConfig{Name: "BYTES", Subjects: []string{"bytes"}, MaxBytes: 8 << 10, Discard: jetstream.DiscardNew})
	mustStream(jetstream.StreamConfig{Name: "MSGS", Subjects: []string{"msgs"}, MaxMsgs: 3, Discard: jetstream.DiscardNew})
	for _, subject := range []string{"bytes", "msgs"} {
		err := fill(t, ctx, js, subject)
		t.Logf("%s at its limit: %s", subject, code(err))
		if !StoreFull(err) {
			t.Errorf("%s at its limit: StoreFull(%s) = false", subject, code(err))
		}
	}

	mustStream(jetstream.StreamConfig{Name: "ALL", Subjects: []string{"all.>"}, AllowAtomicPublish: true})
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "kv"})
	if err != nil {
		t.Fatal(err)
	}
	err = fill(t, ctx, js, "all.plain")
	t.Logf("max_file_store used up, publish: %s", code(err))
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != ErrCodeInsufficientResources || !StoreFull(err) {
		t.Errorf("publish to a full server: %s, want %d and StoreFull", code(err), ErrCodeInsufficientResources)
	}
	f, err := js.PublishMsgAsync(NewMsg("all.async", "async-1", []byte("x")))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-f.Ok():
		t.Error("an asynchronous publish to a full server was stored")
	case err := <-f.Err():
		t.Logf("asynchronous publish: %s", code(err))
		if !StoreFull(err) {
			t.Errorf("asynchronous publish: StoreFull(%s) = false", code(err))
		}
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	_, err = NewCommitter(js, CommitterConfig{RetryFor: 2 * time.Second}).Commit(ctx,
		[]*nats.Msg{NewMsg("all.batch", "b-1", []byte("1")), NewMsg("all.batch", "b-2", []byte("2"))})
	t.Logf("atomic batch: %s", code(err))
	if !StoreFull(err) {
		t.Errorf("atomic batch: StoreFull(%s) = false", code(err))
	}
	for name, put := range map[string]func() error{
		"kv create": func() error { _, err := kv.Create(ctx, "k", []byte("v")); return err },
		"kv put":    func() error { _, err := kv.Put(ctx, "k", []byte("v")); return err },
	} {
		err := put()
		t.Logf("%s: %s", name, code(err))
		if !StoreFull(err) {
			t.Errorf("%s: StoreFull(%s) = false", name, code(err))
		}
	}

	for _, err := range []error{
		nil, context.DeadlineExceeded, nats.ErrNoResponders, jetstream.ErrKeyExists,
		&jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence, Description: "wrong last sequence: 3"},
		&jetstream.APIError{ErrorCode: ErrCodeStoreFailed, Description: "message size exceeds maximum allowed"},
	} {
		if StoreFull(err) {
			t.Errorf("StoreFull(%v) = true", err)
		}
	}
	if !StoreFull(fmt.Errorf("wrapped: %w", &jetstream.APIError{ErrorCode: ErrCodeAccountResourcesExceeded})) {
		t.Error("the account's limit is not StoreFull")
	}
}

// TestConsumeWaitsWhileTheStoreIsFull: a handler whose publishes a full
// store refuses (its error not wrapped with Retry, as the publisher's KV
// writes) neither stops Consume nor gets anything acknowledged; the
// context's StoreWatch says full; purging an unrelated stream frees room
// and the loop goes on by itself, every message written once.
func TestConsumeWaitsWhileTheStoreIsFull(t *testing.T) {
	for _, ackAll := range []bool{true, false} {
		t.Run(fmt.Sprintf("ackAll=%v", ackAll), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			js := smallStoreServer(t, 256<<10)
			for _, cfg := range []jetstream.StreamConfig{
				{Name: "IN", Subjects: []string{"in"}, Storage: jetstream.MemoryStorage},
				{Name: "OUT", Subjects: []string{"out"}},
				{Name: "FILLER", Subjects: []string{"filler"}},
			} {
				if _, err := js.CreateStream(ctx, cfg); err != nil {
					t.Fatal(err)
				}
			}
			const n = 20
			for i := range n {
				if _, err := js.Publish(ctx, "in", []byte(fmt.Sprint(i))); err != nil {
					t.Fatal(err)
				}
			}
			if err := fill(t, ctx, js, "filler"); !StoreFull(err) {
				t.Fatalf("filling the store: %v", err)
			}
			spec := ConsumerSpec{Stream: "IN", Durable: "c", AckAll: ackAll}
			var w StoreWatch
			done := make(chan error, 1)
			go func() {
				done <- Consume(WithStoreWatch(ctx, &w), js, spec, BatchConfig{Max: 5, RetryInitial: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond},
					func(ctx context.Context, batch []jetstream.Msg) (Outcome, error) {
						for _, m := range batch {
							if _, err := js.PublishMsg(ctx, NewMsg("out", "o-"+string(m.Data()), m.Data())); err != nil {
								return Outcome{}, fmt.Errorf("write: %w", err)
							}
						}
						return Outcome{}, nil
					})
			}()
			testenv.CheckFor(t, 20*time.Second, 10*time.Millisecond, func() error {
				select {
				case err := <-done:
					t.Fatalf("Consume returned while the store is full: %v", err)
				default:
				}
				if full, _, _ := w.Full(); !full || w.Refusals() < 3 {
					return fmt.Errorf("full %v after %d refusals", full, w.Refusals())
				}
				return nil
			})
			c, err := js.Consumer(ctx, "IN", "c")
			if err != nil {
				t.Fatal(err)
			}
			if info, err := c.Info(ctx); err != nil || info.AckFloor.Stream != 0 {
				t.Fatalf("acknowledged while the store is full: %+v (%v)", info.AckFloor, err)
			}
			filler, err := js.Stream(ctx, "FILLER")
			if err != nil {
				t.Fatal(err)
			}
			if err := filler.Purge(ctx); err != nil {
				t.Fatal(err)
			}
			testenv.CheckFor(t, 20*time.Second, 10*time.Millisecond, func() error {
				out, err := js.Stream(ctx, "OUT")
				if err != nil {
					return err
				}
				info, err := c.Info(ctx)
				if err != nil {
					return err
				}
				if full, _, _ := w.Full(); full || out.CachedInfo().State.Msgs != n || info.AckFloor.Stream != n {
					return fmt.Errorf("full %v, OUT holds %d of %d, ack floor %d", full, out.CachedInfo().State.Msgs, n, info.AckFloor.Stream)
				}
				return nil
			})
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("Consume = %v, want nil after cancel", err)
			}
		})
	}
}
