package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// Config is the shape of a deployment's streams.
type Config struct {
	// Partitions is P of docs/spec.md §3. Ensure does not need it (the
	// subjects are wildcards); it is recorded with the other parameters.
	Partitions int
	// DupWindow is JetStream's duplicate window on RAW and VALID
	// (default 2m): retries inside it are dropped by Nats-Msg-Id.
	DupWindow time.Duration
	// Replicas of every stream and bucket (default 1).
	Replicas int
	// MaxAge bounds how long stream data is kept (default DefaultMaxAge;
	// nothing is kept forever). It must cover the promised replay horizon.
	MaxAge time.Duration
	// RowsAge is how long LATE and REJECTED keep their rows at the least
	// (their MaxAge is the larger of the two): the windows' retention
	// (--window-retention), so that receiptctl explain names the late
	// events and conflicts of every window still retained (docs/spec.md
	// §6). Zero: MaxAge.
	RowsAge time.Duration
	// Record is metadata Ensure records on RAW where RAW has none under
	// the same key: the deployment's parameters (config.Params.Record).
	// A recorded value is never replaced.
	Record map[string]string
}

// DefaultDupWindow is Config.DupWindow's default.
const DefaultDupWindow = 2 * time.Minute

// DefaultMaxAge is Config.MaxAge's default (the --retention default): 7 days.
const DefaultMaxAge = 7 * 24 * time.Hour

func (c Config) withDefaults() Config {
	if c.DupWindow <= 0 {
		c.DupWindow = DefaultDupWindow
	}
	if c.Replicas <= 0 {
		c.Replicas = 1
	}
	if c.MaxAge <= 0 {
		c.MaxAge = DefaultMaxAge
	}
	return c
}

// Ensure creates or updates RAW, this generation's derived streams, its
// snapshot bucket and the control bucket. It is safe to call repeatedly and
// concurrently from several services.
func Ensure(ctx context.Context, js jetstream.JetStream, n wire.Names, c Config) error {
	c = c.withDefaults()
	if err := ensureRaw(ctx, js, streamConfig(n, wire.Raw, c), c.Record); err != nil {
		return err
	}
	for _, base := range []string{wire.Valid, wire.Rejected, wire.Late, wire.Changes} {
		cfg := streamConfig(n, base, c)
		_, err := js.CreateOrUpdateStream(ctx, cfg)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			// Another Ensure created the stream, with another config,
			// between this one's update (not found) and create: update it.
			_, err = js.CreateOrUpdateStream(ctx, cfg)
		}
		if err != nil {
			return fmt.Errorf("stream: ensure %s: %w", cfg.Name, err)
		}
	}
	for _, b := range []string{n.Bucket(), wire.ControlBucket} {
		if _, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      b,
			Description: wire.DescribeBucket(b),
			History:     1,
			Storage:     jetstream.FileStorage,
			Replicas:    c.Replicas,
		}); err != nil {
			return fmt.Errorf("stream: ensure bucket %s: %w", b, err)
		}
	}
	// The lease bucket: every write carries its own TTL (Nats-TTL), and
	// an expired key leaves a marker watchers see (pkg/lease).
	if _, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:         n.LeaseBucket(),
		Description:    wire.DescribeBucket(n.LeaseBucket()),
		History:        1,
		Storage:        jetstream.FileStorage,
		Replicas:       c.Replicas,
		LimitMarkerTTL: wire.LeaseMarkerTTL,
	}); err != nil {
		return fmt.Errorf("stream: ensure bucket %s: %w", n.LeaseBucket(), err)
	}
	if n.Generation == wire.DefaultGeneration {
		return ensurePointer(ctx, js)
	}
	return nil
}

// ensureRaw creates RAW as cfg with record as its metadata, or updates it
// to cfg keeping every metadata key it has and adding record's absent
// ones. An update that would change nothing is not sent, so an Ensure
// without a record never races a recording one into losing its keys.
func ensureRaw(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig, record map[string]string) error {
	s, err := js.Stream(ctx, cfg.Name)
	var old *jetstream.StreamConfig
	switch {
	case err == nil:
		old = &s.CachedInfo().Config
	case !errors.Is(err, jetstream.ErrStreamNotFound):
		return fmt.Errorf("stream: ensure %s: %w", cfg.Name, err)
	}
	for attempt := 0; ; attempt++ {
		cfg.Metadata = map[string]string{}
		if old != nil {
			for k, v := range old.Metadata {
				if !strings.HasPrefix(k, "_nats.") {
					cfg.Metadata[k] = v
				}
			}
			if rawUpToDate(*old, cfg, record) {
				return nil
			}
		}
		for k, v := range record {
			if _, ok := cfg.Metadata[k]; !ok {
				cfg.Metadata[k] = v
			}
		}
		_, err = js.CreateOrUpdateStream(ctx, cfg)
		if !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) || attempt > 0 {
			break
		}
		// Another Ensure created RAW between this one's look-up and
		// create: take its metadata and update.
		if s, err = js.Stream(ctx, cfg.Name); err != nil {
			break
		}
		old = &s.CachedInfo().Config
	}
	if err != nil {
		return fmt.Errorf("stream: ensure %s: %w", cfg.Name, err)
	}
	return nil
}

// rawUpToDate reports whether RAW's config old already has what Ensure
// sets in cfg and every key of record.
func rawUpToDate(old, cfg jetstream.StreamConfig, record map[string]string) bool {
	for k := range record {
		if _, ok := old.Metadata[k]; !ok {
			return false
		}
	}
	return slices.Equal(old.Subjects, cfg.Subjects) && old.Retention == cfg.Retention && old.Replicas == cfg.Replicas &&
		old.Duplicates == cfg.Duplicates && old.MaxAge == cfg.MaxAge && old.AllowAtomicPublish == cfg.AllowAtomicPublish &&
		old.Description == cfg.Description
}

// RawMetadata returns RAW's stream metadata (nil when RAW does not exist).
func RawMetadata(ctx context.Context, js jetstream.JetStream) (map[string]string, error) {
	s, err := js.Stream(ctx, wire.Raw)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("stream: look up %s: %w", wire.Raw, err)
	}
	return s.CachedInfo().Config.Metadata, nil
}

// ensurePointer writes the active-generation pointer of a fresh
// deployment (the default generation) unless the key holds a value: a
// pointer a switch wrote is never replaced here, and of concurrent
// Ensures one creates it.
func ensurePointer(ctx context.Context, js jetstream.JetStream) error {
	kv, err := js.KeyValue(ctx, wire.ControlBucket)
	if err != nil {
		return fmt.Errorf("stream: control bucket: %w", err)
	}
	b, err := json.Marshal(wire.Pointer{Generation: wire.DefaultGeneration, SwitchedAt: time.Now().UTC()})
	if err != nil {
		return err
	}
	if _, err := kv.Create(ctx, wire.ActiveKey, b); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("stream: write the active-generation pointer: %w", err)
	}
	return nil
}

// streamConfig is the configuration of stream base; c has its defaults.
func streamConfig(n wire.Names, base string, c Config) jetstream.StreamConfig {
	cfg := jetstream.StreamConfig{
		Name:        n.Stream(base),
		Description: wire.Describe(base),
		Subjects:    []string{n.Wildcard(base)},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Replicas:    c.Replicas,
		Duplicates:  c.DupWindow,
		MaxAge:      c.MaxAge,
	}
	switch base {
	case wire.Raw:
		// Ingest writes RAW in atomic batches, so that the file's order
		// per partition (heartbeats included) is kept across broker
		// restarts and leader changes (docs/spec.md §4; Committer).
		// Ensure turns it on for an existing stream too.
		cfg.AllowAtomicPublish = true
	case wire.Valid:
		// The validator writes VALID in atomic batches, so that each
		// partition's messages are stored in RAW order whatever fails
		// (Committer). Ensure turns it on for an existing stream
		// too (CreateOrUpdateStream updates it).
		cfg.AllowAtomicPublish = true
	case wire.Late, wire.Rejected:
		cfg.MaxAge = max(c.MaxAge, c.RowsAge)
	case wire.Changes:
		// Change notices are only a wake-up: the publisher rebuilds
		// snapshots from Redis, so a bounded history is enough.
		cfg.MaxAge = time.Hour
	}
	return cfg
}

// ConsumerSpec describes one durable pull consumer.
type ConsumerSpec struct {
	Stream  string
	Durable string
	Filter  string
	// StartSeq, when non-zero, is the first stream sequence to deliver; the
	// consumer is recreated there if it would deliver anything else. Zero
	// resumes after the consumer's ack floor.
	StartSeq uint64
	// MaxAckPending bounds unacknowledged messages (default 20000).
	MaxAckPending int
	// AckAll acknowledges every earlier message with one ack (in-order
	// consumers); otherwise acks are explicit.
	AckAll bool
}

// openAttempt bounds one attempt of Open. A clustered nats-server leaves
// some API requests unanswered while a group has no leader (a member that
// is not the leader stays silent so that the leader may answer), and a
// request nobody answers waits for its context's deadline: the caller's
// whole deadline, without this bound.
var openAttempt = 10 * time.Second

// Open returns the durable consumer of spec, positioned so that the next
// message delivered is the first one not yet processed: after StartSeq-1
// when StartSeq is set (the caller's own checkpoint), else after the ack
// floor. A consumer left with unacknowledged deliveries by a crashed
// instance is recreated at that position, so nothing waits for AckWait.
// The caller must own the consumer exclusively. A cluster that cannot
// answer for now (connect.Transient: no leader, no quorum, a node cut off)
// is waited out until ctx ends; then ctx's cause is returned. Each attempt
// waits at most openAttempt for the server's answers.
func Open(ctx context.Context, js jetstream.JetStream, spec ConsumerSpec) (jetstream.Consumer, error) {
	var c jetstream.Consumer
	err := connect.WaitFor(ctx, func(ctx context.Context) error {
		actx, cancel := context.WithTimeout(ctx, openAttempt)
		defer cancel()
		var err error
		c, err = open(actx, js, spec)
		return err
	}, nil)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// open is one attempt of Open.
func open(ctx context.Context, js jetstream.JetStream, spec ConsumerSpec) (jetstream.Consumer, error) {
	if spec.MaxAckPending <= 0 {
		spec.MaxAckPending = 20000
	}
	next := spec.StartSeq
	c, err := js.Consumer(ctx, spec.Stream, spec.Durable)
	switch {
	case err == nil:
		info := c.CachedInfo()
		floor := info.AckFloor.Stream
		if next == 0 {
			next = floor + 1
		}
		if info.NumAckPending == 0 && info.Delivered.Stream+1 == next {
			return c, nil
		}
		if err := js.DeleteConsumer(ctx, spec.Stream, spec.Durable); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil, fmt.Errorf("stream: reset consumer %s: %w", spec.Durable, err)
		}
	case errors.Is(err, jetstream.ErrConsumerNotFound):
	default:
		return nil, fmt.Errorf("stream: consumer %s: %w", spec.Durable, err)
	}
	cfg := jetstream.ConsumerConfig{
		Durable:       spec.Durable,
		Description:   strings.TrimSpace("receiptflow: " + spec.Durable + " reads " + spec.Stream + " " + spec.Filter),
		FilterSubject: spec.Filter,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		MaxAckPending: spec.MaxAckPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
	if spec.AckAll {
		cfg.AckPolicy = jetstream.AckAllPolicy
	}
	if next > 1 {
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = next
	}
	c, err = js.CreateConsumer(ctx, spec.Stream, cfg)
	if err != nil {
		return nil, fmt.Errorf("stream: create consumer %s: %w", spec.Durable, err)
	}
	return c, nil
}
