//go:build demo

package stream

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestPublishAllLosesOrderThroughLeaderLoss is the same run with the old
// validator's PublishAll, to show that the test catches the defect. It is
// expected to FAIL, so it is built only with the demo tag:
//
//	go test -tags demo -run TestPublishAllLosesOrderThroughLeaderLoss ./pkg/stream
func TestPublishAllLosesOrderThroughLeaderLoss(t *testing.T) {
	testOrderedLeaderLoss(t, func(js jetstream.JetStream) publishFunc {
		return func(ctx context.Context, msgs []*nats.Msg) error {
			_, err := PublishAll(ctx, js, msgs)
			return err
		}
	})
}
