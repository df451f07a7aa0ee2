package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"

	"github.com/receiptflow/receiptflow/pkg/config"
	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/replay"
	"github.com/receiptflow/receiptflow/pkg/service"
	"github.com/receiptflow/receiptflow/pkg/validator"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

func cmdReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config.Common
	c.Register(fs)
	var natsSec connect.NATSSecurity
	natsSec.Register(fs)
	var redisSec connect.RedisSecurity
	redisSec.Register(fs)
	which := fs.String("stream", "", "stream to re-drive: RAW (through the validator) or VALID (through the windower)")
	from := fs.Uint64("from-seq", 0, "first stream sequence (required)")
	to := fs.Uint64("to-seq", 0, "last stream sequence (default: the stream's last)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *which != wire.Raw && *which != wire.Valid {
		return usageError("--stream must be RAW or VALID")
	}
	if *from == 0 {
		return usageError("--from-seq N (N >= 1) is required")
	}
	if *to != 0 && *to < *from {
		return usageError("--to-seq %d is before --from-seq %d", *to, *from)
	}
	if c.NATSURL == "" || (*which == wire.Raw && c.RedisURL == "") {
		return usageError("--nats-url (and for RAW --redis-url) of the running deployment are required")
	}
	if err := c.Validate(); err != nil {
		return usageError("%v", err)
	}
	conn, refusals, err := connectOperator(c.NATSURL, "receiptctl-replay", natsSec)
	if err != nil {
		return err
	}
	defer conn.NC.Drain()
	// A refused request only times out: stop at the first refusal instead.
	ctx, stop := refusals.Context(ctx)
	defer stop()
	names := wire.For(c.Generation)
	r := replay.Range{From: *from, To: *to}
	var st replay.Stats
	if *which == wire.Valid {
		st, err = replay.Valid(ctx, conn.JS, names, r)
	} else {
		rdb, err2 := connect.ConnectRedisSecure(c.RedisURL, redisSec)
		if err2 != nil {
			return err2
		}
		defer rdb.Close()
		if err2 := rdb.Ping(ctx).Err(); err2 != nil {
			return fmt.Errorf("redis %s as %s: %w (the RAW replay claims event ids as the validator does: give an operator user with --redis-user and --redis-password-file or REDIS_PASSWORD)",
				connect.RedactURL(c.RedisURL), redisWho(redisSec), err2)
		}
		v, err2 := contract.NewValidator(c.Contract())
		if err2 != nil {
			return err2
		}
		store := service.NewStore(rdb, names, service.ParamsOf(&c))
		st, err = replay.Raw(ctx, conn.JS, store, validator.Config{Names: names, Partitions: c.Partitions, HotKeys: c.Hot(), Validator: v}, r)
	}
	if err != nil {
		return explainRefusal(err, refusals, natsSec)
	}
	fmt.Fprintf(stdout, "replay: re-drove %s %d..%d (%s) of generation %s; downstream dedup keeps every count and version as it was\n",
		*which, *from, st.To, plural(st.Read, "message", ""), names.Generation)
	return nil
}

// redisWho names the Redis principal of sec for messages.
func redisWho(sec connect.RedisSecurity) string {
	if sec.Username != "" {
		return "user " + strconv.Quote(sec.Username)
	}
	return "the user of the URL (default if none)"
}
