package service

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/receiptflow/receiptflow/pkg/internal/telemetry"
)

// DefaultStatsEvery is how often the consumer backlog is sampled when
// nothing else is asked (the services' --stats-interval default).
const DefaultStatsEvery = 5 * time.Second

// BacklogGauges are a service's consumer backlog gauges,
// receiptflow_<svc>_consumer_{pending,ack_pending,redelivered}_messages
// {stream,consumer}: pkg/daemon sets them for a service process, pkg/pipeline
// for the services it runs in-process. Safe for concurrent use.
type BacklogGauges struct {
	pending, ackPending, redelivered *prometheus.GaugeVec
}

// NewBacklogGauges registers service svc's backlog gauges on reg (nil:
// none); registering them again returns the gauges registered first.
func NewBacklogGauges(svc string, reg prometheus.Registerer) *BacklogGauges {
	ns := "receiptflow_" + svc + "_"
	labels := []string{"stream", "consumer"}
	return &BacklogGauges{
		pending: telemetry.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: ns + "consumer_pending_messages",
			Help: "Messages in the stream not yet delivered to this service's consumer."}, labels)),
		ackPending: telemetry.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: ns + "consumer_ack_pending_messages",
			Help: "Messages delivered to this service's consumer and not yet acknowledged."}, labels)),
		redelivered: telemetry.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: ns + "consumer_redelivered_messages",
			Help: "Messages of this service's consumer delivered more than once and not yet acknowledged."}, labels)),
	}
}

// Set records what ci says of its consumer.
func (g *BacklogGauges) Set(ci *jetstream.ConsumerInfo) {
	g.pending.WithLabelValues(ci.Stream, ci.Name).Set(float64(ci.NumPending))
	g.ackPending.WithLabelValues(ci.Stream, ci.Name).Set(float64(ci.NumAckPending))
	g.redelivered.WithLabelValues(ci.Stream, ci.Name).Set(float64(ci.NumRedelivered))
}

// Reset drops every consumer's gauges (the consumers owned changed).
func (g *BacklogGauges) Reset() {
	g.pending.Reset()
	g.ackPending.Reset()
	g.redelivered.Reset()
}

// Sample reads each consumer of cs and sets its gauges; a consumer not
// made yet is skipped. It returns the first other error, after trying
// every consumer.
func (g *BacklogGauges) Sample(ctx context.Context, js jetstream.JetStream, cs []Consumer) error {
	var first error
	for _, c := range cs {
		cons, err := js.Consumer(ctx, c.Stream, c.Durable)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			continue
		}
		if err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		g.Set(cons.CachedInfo())
	}
	return first
}
