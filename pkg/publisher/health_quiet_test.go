package publisher

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/wire"
)

// TestHealthBacklogWhileQuiet: the health tick lists the consumers again
// whenever RAW grew or a backlog was not zero, and only then; a quiet
// pipeline's report keeps the zero backlog it last listed.
func TestHealthBacklogWhileQuiet(t *testing.T) {
	r := newHistoryRig(t, 0)
	names := wire.For("")
	durable := wire.Durable("validator", 0)
	raw, err := r.js.Stream(r.ctx, names.Stream(wire.Raw))
	if err != nil {
		t.Fatal(err)
	}
	cons, err := raw.CreateOrUpdateConsumer(r.ctx, jetstream.ConsumerConfig{Durable: durable,
		FilterSubject: names.Subject(wire.Raw, 0), AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	backlog := func(what string, want uint64, listed bool) {
		t.Helper()
		before := r.svc.hc.listed
		h, err := r.svc.health(r.ctx)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := h.Backlog[durable]
		if !ok || got != want {
			t.Fatalf("%s: backlog of %s %d (%v), want %d", what, durable, got, ok, want)
		}
		if again := r.svc.hc.listed != before; again != listed {
			t.Fatalf("%s: listed again %v, want %v", what, again, listed)
		}
	}
	backlog("first tick", 0, true)
	backlog("quiet", 0, false)
	if _, err := r.js.Publish(r.ctx, names.Subject(wire.Raw, 0), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	backlog("RAW grew", 1, true)
	backlog("a backlog was not zero", 1, true)
	batch, err := cons.Fetch(1)
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		if err := m.DoubleAck(r.ctx); err != nil {
			t.Fatal(err)
		}
	}
	backlog("delivered and acknowledged", 0, true)
	backlog("quiet again", 0, false)
	if _, err := r.js.Publish(r.ctx, names.Subject(wire.Raw, 0), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	backlog("RAW grew after a quiet tick", 1, true)
}
