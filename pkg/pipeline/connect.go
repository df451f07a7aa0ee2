package pipeline

import (
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
)

// Conn is one service instance's own NATS connection.
type Conn struct {
	NC *nats.Conn
	JS jetstream.JetStream
}

// ConnectNATS connects to url as name, reconnecting forever, and returns
// the connection with its JetStream context.
func ConnectNATS(url, name string, extra ...nats.Option) (*Conn, error) {
	opts := append([]nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(100 * time.Millisecond),
		nats.RetryOnFailedConnect(false),
	}, extra...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("pipeline: connect nats %s: %w", name, err)
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(8192))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("pipeline: jetstream %s: %w", name, err)
	}
	return &Conn{NC: nc, JS: js}, nil
}

// Close drops the connection at once: nothing in flight is flushed or
// acked, as when a process dies.
func (c *Conn) Close() { c.NC.Close() }

// ConnectRedis returns a client for a redis:// URL (or host:port).
func ConnectRedis(url string) (*redis.Client, error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		opts = &redis.Options{Addr: url}
	}
	opts.MaxRetries = 3
	return redis.NewClient(opts), nil
}
