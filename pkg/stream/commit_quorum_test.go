package stream

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/testenv"
)

// TestCommitGoesOnWhileTheStreamAnswers (docs/spec.md §4): with
// WhileStream, a batch that fails for a passing reason is retried past
// RetryFor as long as the named stream's leader answers; once nothing
// answers for another RetryFor, Commit gives up, as it does without
// WhileStream after RetryFor.
func TestCommitGoesOnWhileTheStreamAnswers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, url := testenv.NATS(t)
	js := testenv.JetStream(t, url)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "LEADER", Subjects: []string{"leader.>"}}); err != nil {
		t.Fatal(err)
	}
	// Nothing takes "late.>" yet: every attempt fails (no responders).
	msg := func(n string) *nats.Msg {
		return &nats.Msg{Subject: "late.0", Header: nats.Header{jetstream.MsgIDHeader: []string{n}}, Data: []byte(n)}
	}
	const retryFor = 300 * time.Millisecond

	began := time.Now()
	_, err := NewCommitter(js, CommitterConfig{RetryFor: retryFor}).Commit(ctx, []*nats.Msg{msg("a")})
	if err == nil || time.Since(began) > 5*retryFor {
		t.Fatalf("without WhileStream: %v after %s, want an error after about %s", err, time.Since(began), retryFor)
	}
	began = time.Now()
	_, err = NewCommitter(js, CommitterConfig{RetryFor: retryFor, WhileStream: "MISSING"}).Commit(ctx, []*nats.Msg{msg("b")})
	if err == nil || time.Since(began) > 10*retryFor {
		t.Fatalf("a stream that does not answer: %v after %s, want an error after about %s", err, time.Since(began), 2*retryFor)
	}

	done := make(chan error, 1)
	go func() {
		_, err := NewCommitter(js, CommitterConfig{RetryFor: retryFor, WhileStream: "LEADER"}).Commit(ctx, []*nats.Msg{msg("c")})
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("the stream answers, yet Commit returned after %s: %v", time.Since(began), err)
	case <-time.After(10 * retryFor):
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "LATE", Subjects: []string{"late.>"}, AllowAtomicPublish: true}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("once the stream takes the batch: %v", err)
		}
	case <-ctx.Done():
		t.Fatal(errors.New("Commit did not return once the stream took the batch"))
	}
}

// TestQuorumFromClusterInfo: a leader with a majority of current, online
// peers is a quorum; a node left alone that still names itself leader, with
// its peers gone, is not.
func TestQuorumFromClusterInfo(t *testing.T) {
	peer := func(current, offline bool) *jetstream.PeerInfo {
		return &jetstream.PeerInfo{Name: "n", Current: current, Offline: offline}
	}
	for _, c := range []struct {
		name string
		ci   *jetstream.ClusterInfo
		want bool
	}{
		{"not clustered", nil, true},
		{"one replica", &jetstream.ClusterInfo{Leader: "n1"}, true},
		{"no leader", &jetstream.ClusterInfo{Replicas: []*jetstream.PeerInfo{peer(true, false), peer(true, false)}}, false},
		{"R3, all up", &jetstream.ClusterInfo{Leader: "n1", Replicas: []*jetstream.PeerInfo{peer(true, false), peer(true, false)}}, true},
		{"R3, one behind", &jetstream.ClusterInfo{Leader: "n1", Replicas: []*jetstream.PeerInfo{peer(true, false), peer(false, false)}}, true},
		{"R3, left alone", &jetstream.ClusterInfo{Leader: "n1", Replicas: []*jetstream.PeerInfo{peer(false, true), peer(false, false)}}, false},
	} {
		if got := quorum(c.ci); got != c.want {
			t.Errorf("%s: quorum %v, want %v", c.name, got, c.want)
		}
	}
}
