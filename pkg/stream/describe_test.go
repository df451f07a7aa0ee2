package stream

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// TestEnsureDescribesWhatItCreates: every stream and bucket the set-up
// creates, and every consumer Open creates, says what it is, so an
// operator's `nats stream ls` or `nats consumer ls` is readable. Before,
// all of them had an empty description.
func TestEnsureDescribesWhatItCreates(t *testing.T) {
	_, url := testenv.NATS(t)
	js := testenv.JetStream(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := wire.For("1")
	if err := Ensure(ctx, js, n, Config{Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	for _, base := range []string{wire.Raw, wire.Valid, wire.Rejected, wire.Late, wire.Changes} {
		s, err := js.Stream(ctx, n.Stream(base))
		if err != nil {
			t.Fatal(err)
		}
		if d := s.CachedInfo().Config.Description; !strings.HasPrefix(d, "receiptflow: ") || d != wire.Describe(base) {
			t.Errorf("stream %s: description %q, want %q", base, d, wire.Describe(base))
		}
	}
	for _, b := range []string{n.Bucket(), wire.ControlBucket} {
		kv, err := js.KeyValue(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		st, err := kv.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if d := st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config.Description; d != wire.DescribeBucket(b) || d == "" {
			t.Errorf("bucket %s: description %q, want %q", b, d, wire.DescribeBucket(b))
		}
	}
	c, err := Open(ctx, js, ConsumerSpec{Stream: n.Stream(wire.Valid), Durable: "windower-p1", Filter: n.Subject(wire.Valid, 1), AckAll: true})
	if err != nil {
		t.Fatal(err)
	}
	if d := c.CachedInfo().Config.Description; !strings.Contains(d, "windower-p1") || !strings.Contains(d, n.Stream(wire.Valid)) {
		t.Errorf("consumer description %q, want one naming windower-p1 and its stream", d)
	}
}
