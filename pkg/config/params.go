package config

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// Params are a deployment's parameters that change what it counts. The
// set-up records them per generation on RAW (Record); every reader takes
// them from there (Adopt).
type Params struct {
	// Partitions is P of docs/spec.md §3.
	Partitions int
	// Lateness and Grace are the watermark lateness and the grace period
	// of docs/spec.md §3.
	Lateness time.Duration
	Grace    time.Duration
	// HeartbeatEvery is ingest's heartbeat period in records.
	HeartbeatEvery int
	// MaxFutureSkew: an event time later than the record's received time
	// plus this is future_timestamp (docs/spec.md §2).
	MaxFutureSkew time.Duration
	// HotKeys declares partition keys spread over several partitions
	// ("key=k,..."; see window.Route).
	HotKeys string
	// ReplayHorizon: window state is retired this long (event time) after
	// the window became final; 0 keeps it forever.
	ReplayHorizon time.Duration
	// SourceIdle: a source whose progress has not grown for this long of
	// a partition's broker time stops holding that partition's watermark
	// (docs/spec.md §3.1); 0 is window.DefaultSourceIdle.
	SourceIdle time.Duration
}

// Defaults returns the parameters of a deployment that no flag and no
// record sets: the defaults of docs/spec.md.
func Defaults() Params {
	return Params{
		Partitions: 8, Lateness: window.DefaultLateness, Grace: window.DefaultGrace, HeartbeatEvery: 1000,
		MaxFutureSkew: contract.DefaultMaxFutureSkew, ReplayHorizon: 24 * time.Hour,
		SourceIdle: window.DefaultSourceIdle,
	}
}

// ErrDisagrees is wrapped by Adopt's error when a flag given explicitly
// disagrees with the deployment's recorded value.
var ErrDisagrees = errors.New("disagrees with the deployment's recorded value")

// param is one recorded parameter: its flag (also its record key), the
// environment variable that sets the flag, its canonical text and parser.
type param struct {
	flag, env string
	show      func(Params) string
	parse     func(string, *Params) error
}

func durationParam(flag, env string, field func(*Params) *time.Duration) param {
	return param{flag, env, func(p Params) string { return field(&p).String() },
		func(s string, p *Params) (err error) { *field(p), err = time.ParseDuration(s); return err }}
}

func intParam(flag string, field func(*Params) *int) param {
	return param{flag, "", func(p Params) string { return strconv.Itoa(*field(&p)) },
		func(s string, p *Params) (err error) { *field(p), err = strconv.Atoi(s); return err }}
}

// params lists the recorded parameters; partitions comes first, as hot
// keys are read against it.
var params = []param{
	intParam("partitions", func(p *Params) *int { return &p.Partitions }),
	durationParam("lateness", "", func(p *Params) *time.Duration { return &p.Lateness }),
	durationParam("grace", "", func(p *Params) *time.Duration { return &p.Grace }),
	intParam("heartbeat-every", func(p *Params) *int { return &p.HeartbeatEvery }),
	durationParam("max-future-skew", "RECEIPTS_MAX_FUTURE_SKEW", func(p *Params) *time.Duration { return &p.MaxFutureSkew }),
	durationParam("replay-horizon", "", func(p *Params) *time.Duration { return &p.ReplayHorizon }),
	durationParam("source-idle", "", func(p *Params) *time.Duration { return &p.SourceIdle }),
	{"hot-keys", "RECEIPTS_HOT_KEYS", func(p Params) string {
		if h, err := window.ParseHotKeys(p.HotKeys, p.Partitions); err == nil {
			return h.String()
		}
		return p.HotKeys
	}, func(s string, p *Params) error { p.HotKeys = s; return nil }},
}

// Record returns p as RAW stream metadata of generation gen (keys
// wire.Names.ParamKey, values in canonical form).
func (p Params) Record(gen string) map[string]string {
	n := wire.For(gen)
	m := make(map[string]string, len(params))
	for _, f := range params {
		m[n.ParamKey(f.flag)] = f.show(p)
	}
	return m
}

// Adopt takes generation gen's recorded parameters from meta (RAW's stream
// metadata): a parameter whose flag was not given (explicit false) takes
// the recorded value; one given with another value fails, naming both
// (ErrDisagrees). Parameters without a record keep their value. It
// reports whether meta records any parameter of gen.
func (p *Params) Adopt(meta map[string]string, gen string, explicit func(flag string) bool) (bool, error) {
	n := wire.For(gen)
	found := false
	for _, f := range params {
		v, ok := meta[n.ParamKey(f.flag)]
		if !ok {
			continue
		}
		found = true
		rec := *p
		if err := f.parse(v, &rec); err != nil {
			return found, fmt.Errorf("the deployment's recorded %s %q (generation %s): %w", f.flag, v, n.Generation, err)
		}
		if !explicit(f.flag) {
			*p = rec
			continue
		}
		if given, recorded := f.show(*p), f.show(rec); given != recorded {
			return found, fmt.Errorf("--%s %s %w %s (generation %s): leave the flag out, or rebuild into a new generation",
				f.flag, orNone(given), ErrDisagrees, orNone(recorded), n.Generation)
		}
	}
	return found, nil
}

func orNone(s string) string {
	if s == "" {
		return `""`
	}
	return s
}

// Explicit reports, for a recorded parameter's flag, whether fs's command
// line or the flag's environment variable gave it a value.
func Explicit(fs *flag.FlagSet) func(flag string) bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, f := range params {
		if f.env != "" && os.Getenv(f.env) != "" {
			set[f.flag] = true
		}
	}
	return func(flag string) bool { return set[flag] }
}

// Recorded returns RAW's stream metadata, where the set-up records every
// generation's parameters; nil when RAW does not exist yet.
func Recorded(ctx context.Context, js jetstream.JetStream) (map[string]string, error) {
	return stream.RawMetadata(ctx, js)
}

// Register adds the flags of the parameters (but --heartbeat-every, which
// only the commands that place heartbeats have) to fs, with the Defaults.
func (p *Params) Register(fs *flag.FlagSet) {
	d := Defaults()
	p.HeartbeatEvery = d.HeartbeatEvery
	fs.IntVar(&p.Partitions, "partitions", d.Partitions, "number of partitions P (fnv1a32(partition_key) mod P)")
	fs.DurationVar(&p.Lateness, "lateness", d.Lateness, "watermark lateness: W_p = max event time - lateness")
	fs.DurationVar(&p.Grace, "grace", d.Grace, "grace after a window's end during which late events are counted as corrections")
	fs.DurationVar(&p.MaxFutureSkew, "max-future-skew", envDuration("RECEIPTS_MAX_FUTURE_SKEW", d.MaxFutureSkew),
		"how far after its received time (the broker's timestamp of its RAW message) an event may have occurred; later is future_timestamp (env RECEIPTS_MAX_FUTURE_SKEW)")
	fs.StringVar(&p.HotKeys, "hot-keys", os.Getenv("RECEIPTS_HOT_KEYS"), "partition keys too busy for one partition, spread by event id over k partitions: key=k,... (env RECEIPTS_HOT_KEYS); ingest, validator and reconcile must agree, and changing it needs a rebuild")
	fs.DurationVar(&p.SourceIdle, "source-idle", d.SourceIdle, "broker time a partition moves on without a source's progress growing before that source stops holding the partition's watermark (docs/spec.md §3.1)")
	fs.DurationVar(&p.ReplayHorizon, "replay-horizon", d.ReplayHorizon, "event time after a window is final before its ledger and state are retired (0: never); events of retired windows are dropped as too late")
}

// RegisterHeartbeat adds --heartbeat-every to fs.
func (p *Params) RegisterHeartbeat(fs *flag.FlagSet, usage string) {
	fs.IntVar(&p.HeartbeatEvery, "heartbeat-every", Defaults().HeartbeatEvery, usage)
}

// Validate checks the values.
func (p *Params) Validate() error {
	switch {
	case p.Partitions < 1 || p.Partitions > 1024:
		return fmt.Errorf("--partitions must be between 1 and 1024, got %d", p.Partitions)
	case p.Lateness < 0:
		return fmt.Errorf("--lateness must not be negative")
	case p.Grace < 0:
		return fmt.Errorf("--grace must not be negative")
	case p.ReplayHorizon < 0:
		return fmt.Errorf("--replay-horizon must not be negative")
	case p.SourceIdle < 0:
		return fmt.Errorf("--source-idle must not be negative, got %s", p.SourceIdle)
	case p.MaxFutureSkew <= 0:
		return fmt.Errorf("--max-future-skew must be positive, got %s", p.MaxFutureSkew)
	}
	if _, err := window.ParseHotKeys(p.HotKeys, p.Partitions); err != nil {
		return fmt.Errorf("--hot-keys: %w", err)
	}
	return nil
}

// Hot returns the parsed --hot-keys (nil when none or invalid; Validate
// reports the error).
func (p *Params) Hot() window.HotKeys {
	h, _ := window.ParseHotKeys(p.HotKeys, p.Partitions)
	return h
}

// Contract returns the record contract's options the parameters set.
func (p *Params) Contract() contract.Config {
	return contract.Config{MaxFutureSkew: p.MaxFutureSkew}
}

// HasRecord reports whether meta records any parameter of generation gen.
func HasRecord(meta map[string]string, gen string) bool {
	n := wire.For(gen)
	for _, f := range params {
		if _, ok := meta[n.ParamKey(f.flag)]; ok {
			return true
		}
	}
	return false
}

// Inherit takes generation gen's recorded parameters for the flags not
// given (explicit false) and keeps the given ones: how a new generation
// starts from the one it is built from.
func (p *Params) Inherit(meta map[string]string, gen string, explicit func(flag string) bool) error {
	n := wire.For(gen)
	own := map[string]string{}
	for _, f := range params {
		if v, ok := meta[n.ParamKey(f.flag)]; ok && !explicit(f.flag) {
			own[n.ParamKey(f.flag)] = v
		}
	}
	_, err := p.Adopt(own, gen, explicit)
	return err
}
