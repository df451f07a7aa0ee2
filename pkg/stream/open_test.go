package stream

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/receiptflow/receiptflow/pkg/testenv"
)

// TestOpenRetriesARequestNobodyAnswers: a clustered nats-server leaves
// some API requests unanswered while a group has no leader (the member
// that is not the leader stays silent, so that the leader may answer). An
// attempt of Open waits for such an answer at most openAttempt, whatever
// the caller's deadline, and tries again. Before, one unanswered request
// held Open until the caller's deadline (CI: TestOpenWaitsOutUnavailableCluster
// timed out after its nodes were back).
//
// The requests reach a real server through a relay on another API prefix
// that drops the first one, as such a member does.
func TestOpenRetriesARequestNobodyAnswers(t *testing.T) {
	_, url := testenv.NATS(t)
	js := testenv.JetStream(t, url)
	nc := js.Conn()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "O", Subjects: []string{"o.>"}}); err != nil {
		t.Fatal(err)
	}

	relay, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()
	var seen atomic.Int64
	if _, err := relay.Subscribe("$R.API.>", func(m *nats.Msg) {
		if seen.Add(1) == 1 {
			return // dropped: no answer
		}
		resp, err := relay.Request("$JS.API."+strings.TrimPrefix(m.Subject, "$R.API."), m.Data, 5*time.Second)
		if err == nil {
			m.Respond(resp.Data)
		}
	}); err != nil {
		t.Fatal(err)
	}
	relay.Flush()
	rjs, err := jetstream.NewWithAPIPrefix(nc, "$R.API")
	if err != nil {
		t.Fatal(err)
	}

	defer func(d time.Duration) { openAttempt = d }(openAttempt)
	openAttempt = 250 * time.Millisecond
	// A deadline far beyond one attempt: Open must not spend it on the
	// dropped request.
	octx, ocancel := context.WithTimeout(ctx, 20*time.Second)
	defer ocancel()
	c, err := Open(octx, rjs, ConsumerSpec{Stream: "O", Durable: "d", Filter: "o.>"})
	if err != nil {
		t.Fatalf("Open: %v after %d requests (the first dropped)", err, seen.Load())
	}
	if name := c.CachedInfo().Name; name != "d" || seen.Load() < 2 {
		t.Fatalf("opened %q after %d requests, want d after the dropped one and more", name, seen.Load())
	}
}
