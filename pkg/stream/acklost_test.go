package stream

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/receiptflow/receiptflow/pkg/testenv"
)

// TestAckLostWhileReconnecting: with no reconnect buffer (the services'
// connections), a publish made while the connection is down (an ack is
// one) fails at once with an error ackLost takes for a lost ack, which
// the consume loop survives (the batch is delivered again); other
// failures stay errors. A windower stopped on such an ack in a CI run of
// TestClusterPartitions.
func TestAckLostWhileReconnecting(t *testing.T) {
	s, url := testenv.NATS(t)
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.ReconnectBufSize(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	s.Shutdown()
	s.WaitForShutdown()
	testenv.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if !nc.IsReconnecting() {
			return errors.New("the connection has not seen the server go")
		}
		return nil
	})
	err = nc.Publish("$JS.ACK.x", []byte("+ACK"))
	if err == nil || !ackLost(err) {
		t.Fatalf("publish while reconnecting: %v; want an error ackLost takes", err)
	}
	for _, other := range []error{nats.ErrConnectionClosed, nats.ErrBadSubject, errors.New("other")} {
		if ackLost(other) {
			t.Fatalf("ackLost(%v) = true; want false", other)
		}
	}
}
