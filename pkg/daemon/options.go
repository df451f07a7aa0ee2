package daemon

import (
	"github.com/receiptflow/receiptflow/pkg/probe"

	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/receiptflow/receiptflow/pkg/buildinfo"
	"github.com/receiptflow/receiptflow/pkg/config"
	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/lease"
)

// options are the process flags beyond config.Common.
type options struct {
	version *bool // --version: print buildinfo.String and exit
	// explicit reports whether a flag of Common was given (flag or env):
	// such a value must agree with the deployment's record.
	explicit  func(string) bool
	natsSec   connect.NATSSecurity
	redisSec  connect.RedisSecurity
	owned     string
	instance  int
	instances int
	// group: a validator or windower given no --instance, --instances or
	// --owned joins its kind's group (pkg/lease) with leases of leaseTTL.
	group      bool
	leaseTTL   time.Duration
	fenceEpoch uint64
	httpAddr   string
	ensure     bool
	ensureOnly bool
	replicas   int
	statsEvery time.Duration
	stallAfter time.Duration
	profileDir string
	dialer     connect.Dialer
	procs      config.Procs
}

// DefaultStallAfter is --stall-after's default: /readyz says not ready
// 15–20 s (one stats interval more) after the service stopped making
// progress.
const DefaultStallAfter = 15 * time.Second

func (o *options) register(fs *flag.FlagSet) {
	o.version = buildinfo.Flag(fs)
	o.natsSec.Register(fs)
	o.redisSec.Register(fs)
	fs.StringVar(&o.owned, "owned", "", "partitions this instance processes, e.g. 0-3 (default: split by --instance/--instances)")
	fs.IntVar(&o.instance, "instance", envInt("RECEIPTS_INSTANCE", 0), "this instance's index (env RECEIPTS_INSTANCE)")
	fs.IntVar(&o.instances, "instances", envInt("RECEIPTS_INSTANCES", 1), "number of instances splitting the partitions (env RECEIPTS_INSTANCES)")
	fs.Uint64Var(&o.fenceEpoch, "fence-epoch", 0,
		"testing only: the fencing epoch of every owned partition in static mode (docs/architecture.md, \"Fencing\"; default 0: not fenced)")
	fs.DurationVar(&o.leaseTTL, "lease-ttl", envDuration("RECEIPTS_LEASE_TTL", lease.DefaultTTL),
		"without --instance/--instances/--owned, a validator or windower shares the partitions with the others of its kind through leases of this TTL: a stopped or stalled instance's partitions move after it (env RECEIPTS_LEASE_TTL; whole seconds, at least 1s)")
	fs.StringVar(&o.httpAddr, "http-addr", envStr("RECEIPTS_HTTP_ADDR", "127.0.0.1:0"), "address of /metrics, /healthz and /readyz (env RECEIPTS_HTTP_ADDR)")
	fs.BoolVar(&o.ensure, "ensure-streams", envBool("RECEIPTS_ENSURE_STREAMS", true),
		"create or update the streams and buckets at start (env RECEIPTS_ENSURE_STREAMS); needs admin rights, so least-privilege deployments set it false and run --ensure-only once")
	fs.BoolVar(&o.ensureOnly, "ensure-only", false, "create or update the streams and buckets, then exit (the set-up job; admin credentials, no Redis)")
	fs.IntVar(&o.replicas, "replicas", envInt("RECEIPTS_REPLICAS", 1), "replicas of every stream and bucket created (env RECEIPTS_REPLICAS; 3 on a 3-node cluster)")
	fs.DurationVar(&o.dialer.PublishAckTimeout, "publish-ack-timeout", envDuration("RECEIPTS_PUBLISH_ACK_TIMEOUT", connect.DefaultPublishAckTimeout),
		"how long an asynchronous publish waits for its ack before the batch fails and is redelivered (env RECEIPTS_PUBLISH_ACK_TIMEOUT)")
	fs.DurationVar(&o.stallAfter, "stall-after", envDuration("RECEIPTS_STALL_AFTER", DefaultStallAfter),
		"how long a consumer may make no progress with messages pending, or go without an answer from its leader, before /readyz says not ready (env RECEIPTS_STALL_AFTER)")
	fs.StringVar(&o.profileDir, "profile-dir", envStr(probe.ProfileEnv, ""),
		"write a CPU profile of the process's life and, at exit, an allocation profile into this directory as <service>[-<instance>].{cpu,allocs}.pprof (env "+probe.ProfileEnv+"; default none)")
	o.procs.Register(fs)
	fs.DurationVar(&o.statsEvery, "stats-interval", envDuration("RECEIPTS_STATS_INTERVAL", 5*time.Second), "how often consumer backlog, state size and Redis health are sampled for /metrics and /readyz (env RECEIPTS_STATS_INTERVAL)")
}

func envStr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func envInt(k string, def int) int {
	var n int
	if _, err := fmt.Sscan(os.Getenv(k), &n); err == nil {
		return n
	}
	return def
}

func envBool(k string, def bool) bool {
	if b, err := strconv.ParseBool(os.Getenv(k)); err == nil {
		return b
	}
	return def
}

func envDuration(k string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(k)); err == nil {
		return d
	}
	return def
}

// errVersion is parse's answer to --version: print the version, exit 0.
var errVersion = errors.New("version asked")

// parse reads the flags of service name from args and checks them.
func parse(name string, args []string) (config.Common, options, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	var c config.Common
	c.Register(fs)
	var o options
	o.register(fs)
	if err := fs.Parse(args); err != nil {
		return c, o, err
	}
	if *o.version {
		return c, o, errVersion
	}
	o.explicit = config.Explicit(fs)
	static := os.Getenv("RECEIPTS_INSTANCE") != "" || os.Getenv("RECEIPTS_INSTANCES") != ""
	fs.Visit(func(f *flag.Flag) {
		static = static || f.Name == "instance" || f.Name == "instances" || f.Name == "owned"
	})
	o.group = !static && (name == "validator" || name == "windower")
	if err := c.Validate(); err != nil {
		return c, o, err
	}
	switch {
	case c.NATSURL == "":
		return c, o, errors.New("--nats-url (or NATS_URL) is required for a service process")
	case c.RedisURL == "" && !o.ensureOnly:
		return c, o, errors.New("--redis-url (or REDIS_URL) is required for a service process")
	case o.instances < 1 || o.instance < 0 || o.instance >= o.instances:
		return c, o, fmt.Errorf("--instance %d of --instances %d is out of range", o.instance, o.instances)
	case o.replicas < 1 || o.replicas > 5:
		return c, o, fmt.Errorf("--replicas must be between 1 and 5, got %d", o.replicas)
	case o.statsEvery <= 0:
		return c, o, errors.New("--stats-interval must be positive")
	case o.leaseTTL < time.Second:
		return c, o, fmt.Errorf("--lease-ttl must be at least 1s, got %s", o.leaseTTL)
	case o.stallAfter <= 0:
		return c, o, errors.New("--stall-after must be positive")
	case o.procs.Validate() != nil:
		return c, o, o.procs.Validate()
	}
	return c, o, nil
}
