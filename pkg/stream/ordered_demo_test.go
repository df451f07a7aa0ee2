//go:build demo

package stream

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestPublishAllLosesOrderThroughLeaderLoss is the leader-loss case of the
// committer contract with the old validator's PublishAll, to show that the
// case catches the defect. It is expected to FAIL, so it is built only
// with the demo tag:
//
//	go test -tags demo -run TestPublishAllLosesOrderThroughLeaderLoss ./pkg/stream
func TestPublishAllLosesOrderThroughLeaderLoss(t *testing.T) {
	testCommitOrderThroughLeaderLoss(t, func(_ *testing.T, js jetstream.JetStream, _ CommitterConfig) commitFunc {
		return func(ctx context.Context, msgs []*nats.Msg) ([]Ack, error) {
			_, err := PublishAll(ctx, js, msgs)
			return nil, err
		}
	})
}
