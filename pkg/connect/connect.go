package connect

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Conn is one service instance's own NATS connection.
type Conn struct {
	NC *nats.Conn
	JS jetstream.JetStream
}

// DefaultPublishAckTimeout is the Dialer.PublishAckTimeout of the zero
// Dialer. The timeout bounds the wait for the ack of an asynchronous
// publish. Without it (nats.go's default), a publish lost with a cluster
// node (sent to a stream leader that died before storing it) is waited for
// forever, and the service that sent it stops without failing. With it the
// publish fails, the service stops with the error and is restarted, and the
// batch is redelivered and published again under the same Nats-Msg-Id.
const DefaultPublishAckTimeout = 15 * time.Second

// PingInterval and MaxPingsOutstanding bound how long a client stays on a
// server it cannot reach (cut off by a network partition, stalled): it
// pings every PingInterval and gives the connection up as stale, and
// reconnects to another server of its list, when MaxPingsOutstanding pings
// in a row went unanswered — 15 to 20 s after the server was last heard
// from (nats.go's defaults, 2 minutes and 2, would take up to 6 minutes).
// docs/deployment.md ("Network partitions") has the whole bound.
const (
	PingInterval        = 5 * time.Second
	MaxPingsOutstanding = 3
)

// Dialer holds the client settings of a NATS connection beyond its
// nats.Options; the zero Dialer has the defaults.
type Dialer struct {
	// PublishAckTimeout bounds the wait for an asynchronous publish's ack
	// (0: DefaultPublishAckTimeout).
	PublishAckTimeout time.Duration
}

// ErrHTTPURL is CheckNATSURL's answer to an http(s) URL.
var ErrHTTPURL = errors.New("looks like an HTTP URL (the dashboard's?), not a NATS one")

// CheckNATSURL returns an error wrapping ErrHTTPURL, saying to pass the
// NATS URL, when a URL of url (one or a comma-separated list) is http://
// or https://: NATS would dial it and time out without a word.
func CheckNATSURL(url string) error {
	for _, u := range strings.Split(url, ",") {
		u = strings.TrimSpace(u)
		if l := strings.ToLower(u); strings.HasPrefix(l, "http://") || strings.HasPrefix(l, "https://") {
			return fmt.Errorf("%s %w: pass the NATS URL, nats://host:4222 (the demo's banner and its urls.json name it)", RedactURL(u), ErrHTTPURL)
		}
	}
	return nil
}

// ConnectNATS connects to url (one URL or a comma-separated list of a
// cluster's URLs) as name, reconnecting forever, and returns the connection
// with its JetStream context. extra options are applied last, e.g. the
// credentials and TLS settings of NATSSecurity.Options.
func ConnectNATS(url, name string, extra ...nats.Option) (*Conn, error) {
	return Dialer{}.ConnectNATS(url, name, extra...)
}

// ConnectNATS is ConnectNATS with d's settings.
func (d Dialer) ConnectNATS(url, name string, extra ...nats.Option) (*Conn, error) {
	if d.PublishAckTimeout < 0 {
		return nil, fmt.Errorf("connect: publish ack timeout %v is negative", d.PublishAckTimeout)
	}
	ackTimeout := d.PublishAckTimeout
	if ackTimeout == 0 {
		ackTimeout = DefaultPublishAckTimeout
	}
	opts := append([]nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(100 * time.Millisecond),
		nats.RetryOnFailedConnect(false),
		// No reconnect buffer: a publish made while disconnected fails at
		// once instead of being sent after the reconnect. Buffered, it could
		// be stored after messages published later that reached another
		// node first, and the services rely on their outputs keeping the
		// order of their input (a failed batch is redelivered and published
		// again in order, duplicates dropped by Nats-Msg-Id).
		nats.ReconnectBufSize(-1),
		nats.PingInterval(PingInterval),
		nats.MaxPingsOutstanding(MaxPingsOutstanding),
	}, extra...)
	if err := CheckNATSURL(url); err != nil {
		return nil, fmt.Errorf("connect: nats %s at %w", name, err)
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect: nats %s at %s: %w", name, RedactURL(url), err)
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(8192), jetstream.WithPublishAsyncTimeout(ackTimeout))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("connect: jetstream %s: %w", name, err)
	}
	return &Conn{NC: nc, JS: js}, nil
}

// MoveOn leaves the server c is connected to for the next one of its
// list (nats.Conn.ForceReconnect), for a client whose requests keep
// failing on a server that its pings still reach (a node cut off from its
// peers answers pings but cannot serve JetStream). It returns at once;
// publishes fail while it reconnects. Safe for concurrent use.
func (c *Conn) MoveOn() error { return MoveOn(c.NC) }

// MoveOn is Conn.MoveOn for a bare connection; a connection with a single
// server reconnects to it.
func MoveOn(nc *nats.Conn) error {
	if nc == nil {
		return nats.ErrInvalidConnection
	}
	return nc.ForceReconnect()
}

// Close drops the connection at once: nothing in flight is flushed or
// acked, as when a process dies.
func (c *Conn) Close() { c.NC.Close() }

// Refusals records the permissions violations a NATS server reports on one
// connection. The server sends them asynchronously: the request that caused
// one gets no reply and only times out. Context ends a wait at the first
// refusal, and Err names what was refused, so a command run with too few
// rights fails at once and says why. The zero value is not usable: call
// NewRefusals. Safe for concurrent use.
type Refusals struct {
	mu    sync.Mutex
	first error
	hit   chan struct{}
}

// NewRefusals returns an empty Refusals.
func NewRefusals() *Refusals { return &Refusals{hit: make(chan struct{})} }

// Option returns the connection option (an error handler) that feeds r.
// Other asynchronous errors are ignored.
func (r *Refusals) Option() nats.Option {
	return nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { r.Note(err) })
}

// Context returns a copy of ctx that is also cancelled at the first
// refusal (already recorded or still to come). Call cancel when done.
func (r *Refusals) Context(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-r.hit:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// Note records err if it is a permissions violation (it wraps
// nats.ErrPermissionViolation); other errors are ignored. It is what the
// handler of Option calls, for a connection whose error handler does more.
func (r *Refusals) Note(err error) {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.first == nil {
		r.first = err
		close(r.hit)
	}
}

// Err returns the first refusal (it wraps nats.ErrPermissionViolation and
// names the subject), or nil.
func (r *Refusals) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.first
}

// ConnectRedis returns a client for a redis:// or rediss:// URL (or
// host:port), without further credentials. See ConnectRedisSecure.
func ConnectRedis(url string) (*redis.Client, error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		opts = &redis.Options{Addr: url}
	}
	opts.MaxRetries = 3
	return redis.NewClient(opts), nil
}

// NATSSecurity is how a service proves who it is to NATS and secures the
// connection: a user and password (deploy/nats/auth.conf) or a JWT creds
// file, and TLS. The password is never a flag (flags show in process
// listings and -h output): it comes from a file or from NATS_PASSWORD.
//
// The zero value connects anonymously, without TLS.
type NATSSecurity struct {
	// User and Password authenticate with user/password; PasswordFile is
	// read when Password is empty (trailing newline ignored).
	User         string
	Password     string
	PasswordFile string
	// CredsFile is a JWT user credentials file (decentralised auth).
	CredsFile string
	// TLSCA verifies the server; TLSCert and TLSKey are the client
	// certificate for mutual TLS. Any of them turns TLS on.
	TLSCA   string
	TLSCert string
	TLSKey  string
	// InboxPrefix is the prefix of the connection's reply subjects. It
	// defaults to "_INBOX.<User>" when User is set, so that each principal
	// subscribes only to its own replies (deploy/nats/auth.conf grants
	// exactly that), else to the NATS default "_INBOX".
	InboxPrefix string
}

// Register adds the NATS credential and TLS flags to fs, defaulting from
// NATS_USER, NATS_PASSWORD_FILE, NATS_CREDS, NATS_TLS_CA, NATS_TLS_CERT,
// NATS_TLS_KEY and NATS_INBOX_PREFIX. NATS_PASSWORD is read by Options.
func (s *NATSSecurity) Register(fs *flag.FlagSet) {
	fs.StringVar(&s.User, "nats-user", os.Getenv("NATS_USER"), "NATS user name (env NATS_USER); the password comes from --nats-password-file or env NATS_PASSWORD")
	fs.StringVar(&s.PasswordFile, "nats-password-file", os.Getenv("NATS_PASSWORD_FILE"), "file holding the NATS password (env NATS_PASSWORD_FILE)")
	fs.StringVar(&s.CredsFile, "nats-creds", os.Getenv("NATS_CREDS"), "NATS JWT user credentials file (env NATS_CREDS)")
	fs.StringVar(&s.TLSCA, "nats-tls-ca", os.Getenv("NATS_TLS_CA"), "CA bundle that verifies the NATS server (env NATS_TLS_CA)")
	fs.StringVar(&s.TLSCert, "nats-tls-cert", os.Getenv("NATS_TLS_CERT"), "client certificate for NATS mutual TLS (env NATS_TLS_CERT)")
	fs.StringVar(&s.TLSKey, "nats-tls-key", os.Getenv("NATS_TLS_KEY"), "client key for NATS mutual TLS (env NATS_TLS_KEY)")
	fs.StringVar(&s.InboxPrefix, "nats-inbox-prefix", os.Getenv("NATS_INBOX_PREFIX"), "reply subject prefix (env NATS_INBOX_PREFIX; default _INBOX.<user> with --nats-user)")
}

// Options returns the nats.Go options for s, reading the password file or
// NATS_PASSWORD. It fails if a file cannot be read or the settings
// contradict each other. Safe to call more than once.
func (s NATSSecurity) Options() ([]nats.Option, error) {
	var opts []nats.Option
	if s.User != "" && s.CredsFile != "" {
		return nil, errors.New("nats: --nats-user and --nats-creds are mutually exclusive")
	}
	if s.User != "" {
		pw, err := secret(s.Password, s.PasswordFile, "NATS_PASSWORD")
		if err != nil {
			return nil, fmt.Errorf("nats: password of user %q: %w", s.User, err)
		}
		opts = append(opts, nats.UserInfo(s.User, pw))
	}
	if s.CredsFile != "" {
		if _, err := os.Stat(s.CredsFile); err != nil {
			return nil, fmt.Errorf("nats: creds file: %w", err)
		}
		opts = append(opts, nats.UserCredentials(s.CredsFile))
	}
	if (s.TLSCert == "") != (s.TLSKey == "") {
		return nil, errors.New("nats: --nats-tls-cert and --nats-tls-key go together")
	}
	if s.TLSCA != "" {
		opts = append(opts, nats.RootCAs(s.TLSCA))
	}
	if s.TLSCert != "" {
		opts = append(opts, nats.ClientCert(s.TLSCert, s.TLSKey))
	}
	if s.TLSCA != "" || s.TLSCert != "" {
		opts = append(opts, nats.Secure(&tls.Config{MinVersion: tls.VersionTLS12}))
	}
	if p := s.inboxPrefix(); p != "" {
		opts = append(opts, nats.CustomInboxPrefix(p))
	}
	return opts, nil
}

func (s NATSSecurity) inboxPrefix() string {
	if s.InboxPrefix != "" {
		return s.InboxPrefix
	}
	if s.User != "" {
		return nats.InboxPrefix + s.User
	}
	return ""
}

// LogValue describes s without any secret, for slog.
func (s NATSSecurity) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("user", s.User),
		slog.Bool("password", s.Password != "" || s.PasswordFile != "" || os.Getenv("NATS_PASSWORD") != ""),
		slog.String("creds_file", s.CredsFile),
		slog.Bool("tls", s.TLSCA != "" || s.TLSCert != ""),
		slog.String("inbox_prefix", s.inboxPrefix()),
	)
}

// RedisSecurity is how a service authenticates to Redis (an ACL user of
// deploy/redis/users.acl) and secures the connection. As for NATS, the
// password is never a flag: it comes from a file or from REDIS_PASSWORD.
// A user and password in the URL also work but end up in process listings.
type RedisSecurity struct {
	Username     string
	Password     string
	PasswordFile string
	// TLSCA, TLSCert, TLSKey: as for NATS. A rediss:// URL turns TLS on
	// with the system roots; any of these turns it on as well.
	TLSCA   string
	TLSCert string
	TLSKey  string
	// Cluster talks to a Redis Cluster (the URL may list several seed
	// nodes, comma-separated). Every ledger script touches one slot.
	Cluster bool
	// Sentinel is the master name Redis Sentinel watches: the URL then
	// lists the sentinels (comma-separated), and the client follows the
	// master they name through a failover (go-redis's failover client).
	Sentinel string
}

// Register adds the Redis credential and TLS flags to fs, defaulting from
// REDIS_USERNAME, REDIS_PASSWORD_FILE, REDIS_TLS_CA, REDIS_TLS_CERT,
// REDIS_TLS_KEY and REDIS_CLUSTER. REDIS_PASSWORD is read at connect time.
func (s *RedisSecurity) Register(fs *flag.FlagSet) {
	fs.StringVar(&s.Username, "redis-user", os.Getenv("REDIS_USERNAME"), "Redis ACL user (env REDIS_USERNAME); the password comes from --redis-password-file or env REDIS_PASSWORD")
	fs.StringVar(&s.PasswordFile, "redis-password-file", os.Getenv("REDIS_PASSWORD_FILE"), "file holding the Redis password (env REDIS_PASSWORD_FILE)")
	fs.StringVar(&s.TLSCA, "redis-tls-ca", os.Getenv("REDIS_TLS_CA"), "CA bundle that verifies Redis (env REDIS_TLS_CA)")
	fs.StringVar(&s.TLSCert, "redis-tls-cert", os.Getenv("REDIS_TLS_CERT"), "client certificate for Redis mutual TLS (env REDIS_TLS_CERT)")
	fs.StringVar(&s.TLSKey, "redis-tls-key", os.Getenv("REDIS_TLS_KEY"), "client key for Redis mutual TLS (env REDIS_TLS_KEY)")
	cluster, _ := strconv.ParseBool(os.Getenv("REDIS_CLUSTER"))
	fs.BoolVar(&s.Cluster, "redis-cluster", cluster, "Redis is a Redis Cluster (env REDIS_CLUSTER)")
	fs.StringVar(&s.Sentinel, "redis-sentinel", os.Getenv("REDIS_SENTINEL"), "master name of a Sentinel-watched Redis; --redis-url then lists the sentinels, comma-separated (env REDIS_SENTINEL; sentinels' own password: env REDIS_SENTINEL_PASSWORD)")
}

// LogValue describes s without any secret, for slog.
func (s RedisSecurity) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("user", s.Username),
		slog.Bool("password", s.Password != "" || s.PasswordFile != "" || os.Getenv("REDIS_PASSWORD") != ""),
		slog.Bool("tls", s.TLSCA != "" || s.TLSCert != ""),
		slog.Bool("cluster", s.Cluster),
		slog.String("sentinel", s.Sentinel),
	)
}

// ConnectRedisSecure returns a client for rawURL (redis://, rediss:// or
// host:port; with Cluster, a comma-separated list of seed nodes; with
// Sentinel, of sentinels) that authenticates and encrypts as sec says: a
// *redis.Client (a failover client with Sentinel), or a
// *redis.ClusterClient with Cluster. It fails if a password or
// certificate file cannot be read. The client connects lazily: Ping it.
func ConnectRedisSecure(rawURL string, sec RedisSecurity) (redis.UniversalClient, error) {
	u := redis.UniversalOptions{
		MaxRetries: 3, IsClusterMode: sec.Cluster,
		// Send nothing on connect beyond HELLO/AUTH: CLIENT SETINFO and
		// CLIENT MAINT_NOTIFICATIONS are not in the services' ACLs.
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
	tlsOn := false
	for _, one := range strings.Split(rawURL, ",") {
		one = strings.TrimSpace(one)
		if one == "" {
			continue
		}
		o, err := redis.ParseURL(one)
		if err != nil {
			if strings.Contains(one, "://") {
				return nil, fmt.Errorf("redis: bad URL %s: %w", RedactURL(one), err)
			}
			o = &redis.Options{Addr: one}
		}
		u.Addrs = append(u.Addrs, o.Addr)
		if o.Username != "" && u.Username == "" {
			u.Username, u.Password = o.Username, o.Password
		} else if o.Password != "" && u.Password == "" {
			u.Password = o.Password
		}
		if !sec.Cluster {
			u.DB = o.DB
		}
		if o.TLSConfig != nil {
			tlsOn = true
		}
	}
	if len(u.Addrs) == 0 {
		return nil, errors.New("redis: no address")
	}
	if sec.Sentinel != "" {
		if sec.Cluster {
			return nil, errors.New("redis: --redis-sentinel and --redis-cluster exclude each other")
		}
		u.MasterName = sec.Sentinel
		u.SentinelPassword = os.Getenv("REDIS_SENTINEL_PASSWORD")
	}
	if !sec.Cluster && sec.Sentinel == "" && len(u.Addrs) > 1 {
		return nil, errors.New("redis: several addresses need --redis-cluster or --redis-sentinel")
	}
	if sec.Username != "" {
		u.Username = sec.Username
	}
	pw, err := secret(sec.Password, sec.PasswordFile, "REDIS_PASSWORD")
	if err != nil && !errors.Is(err, errNoSecret) {
		return nil, fmt.Errorf("redis: password: %w", err)
	}
	if pw != "" {
		u.Password = pw
	}
	if u.Username != "" && u.Password == "" {
		return nil, fmt.Errorf("redis: user %q has no password (--redis-password-file or REDIS_PASSWORD)", u.Username)
	}
	if (sec.TLSCert == "") != (sec.TLSKey == "") {
		return nil, errors.New("redis: --redis-tls-cert and --redis-tls-key go together")
	}
	if tlsOn || sec.TLSCA != "" || sec.TLSCert != "" {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if sec.TLSCA != "" {
			pem, err := os.ReadFile(sec.TLSCA)
			if err != nil {
				return nil, fmt.Errorf("redis: tls ca: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("redis: tls ca %s holds no certificate", sec.TLSCA)
			}
			cfg.RootCAs = pool
		}
		if sec.TLSCert != "" {
			cert, err := tls.LoadX509KeyPair(sec.TLSCert, sec.TLSKey)
			if err != nil {
				return nil, fmt.Errorf("redis: tls client certificate: %w", err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		u.TLSConfig = cfg
	}
	return redis.NewUniversalClient(&u), nil
}

var errNoSecret = errors.New("no password given")

// secret returns value, else the content of file, else the environment
// variable env.
func secret(value, file, env string) (string, error) {
	if value != "" {
		return value, nil
	}
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", err
		}
		v := strings.TrimRight(string(b), "\r\n")
		if v == "" {
			return "", fmt.Errorf("%s is empty", file)
		}
		return v, nil
	}
	if v := os.Getenv(env); v != "" {
		return v, nil
	}
	return "", errNoSecret
}

// RedactURL returns rawURL (or each URL of a comma-separated list) with any
// password replaced by "xxxxx", for logs and errors.
func RedactURL(rawURL string) string {
	parts := strings.Split(rawURL, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil || u.User == nil {
			if err != nil && strings.Contains(p, "@") {
				parts[i] = "(unparsable URL)"
			}
			continue
		}
		if _, hasPW := u.User.Password(); !hasPW {
			u.User = url.User("xxxxx") // a bare user part may be a token
		}
		parts[i] = u.Redacted()
	}
	return strings.Join(parts, ",")
}

// ErrNotYet is what an operation given to WaitFor wraps to say that what
// it waits for is not there yet (a stream the set-up job has still to
// create, say): Transient reports it as transient.
var ErrNotYet = errors.New("not there yet")

// WaitBackOff returns the back-off of WaitFor: exponential from 100ms,
// doubling, each wait jittered by ±50%, capped at 5s, never giving up (the
// caller's context ends the wait). Each call returns a new value.
func WaitBackOff() *backoff.ExponentialBackOff {
	return &backoff.ExponentialBackOff{
		InitialInterval:     100 * time.Millisecond,
		RandomizationFactor: 0.5,
		Multiplier:          2,
		MaxInterval:         5 * time.Second,
	}
}

// WaitFor calls op until it returns nil, returns an error that is not
// Transient, or ctx ends, waiting WaitBackOff between calls; before each
// wait it calls notify (if not nil) with the attempt number (from 1), op's
// error and the wait. It returns nil, op's non-transient error, or ctx's
// cause. Services use it for every wait for a server at start-up (docs/spec.md §4:
// an unreachable or loading server is waited for, never a reason to exit).
// Safe for concurrent use.
func WaitFor(ctx context.Context, op func(context.Context) error, notify func(attempt int, err error, next time.Duration)) error {
	attempt := 0
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		attempt++
		err := op(ctx)
		if err != nil && !Transient(err) {
			return struct{}{}, backoff.Permanent(err)
		}
		return struct{}{}, err
	},
		backoff.WithBackOff(WaitBackOff()),
		backoff.WithMaxElapsedTime(0),
		backoff.WithNotify(func(err error, next time.Duration) {
			if notify != nil {
				notify(attempt, err, next)
			}
		}))
	return err
}

// Transient reports whether err says a server is away for now and a
// later attempt may succeed: it is unreachable (refused, reset, timed out,
// not resolvable yet, an asynchronous publish never acknowledged), restarting (no NATS server, no JetStream responder
// yet), a JetStream cluster without a leader or quorum for now ("JetStream
// system temporarily unavailable", err_code 10008; 10004, 10009, and
// 10005 "no suitable peers"), loading its data (Redis -LOADING,
// -MASTERDOWN, -TRYAGAIN, -CLUSTERDOWN, -BUSY) or failing over (-READONLY:
// a replica not promoted yet). Refused credentials, certificates and permissions
// are not transient, whatever else err wraps: waiting does not fix them.
// An error it does not know is not transient.
func Transient(err error) bool {
	if err == nil || permanent(err) {
		return false
	}
	for _, t := range []error{
		ErrNotYet, io.EOF, io.ErrUnexpectedEOF, io.ErrClosedPipe, net.ErrClosed,
		syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EPIPE, syscall.EHOSTUNREACH, syscall.ENETUNREACH,
		context.DeadlineExceeded,
		nats.ErrNoServers, nats.ErrTimeout, nats.ErrNoResponders, nats.ErrDisconnected, nats.ErrConnectionReconnecting,
		nats.ErrStaleConnection, nats.ErrMaxConnectionsExceeded,
		jetstream.ErrNoHeartbeat, jetstream.ErrJetStreamNotEnabled, jetstream.ErrServerShutdown,
		jetstream.ErrAsyncPublishTimeout, nats.ErrAsyncPublishTimeout,
		jetstream.ErrNoStreamResponse, nats.ErrNoStreamResponse,
	} {
		if errors.Is(err, t) {
			return true
		}
	}
	if jsUnavailable(err) {
		return true
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		msg := rerr.Error()
		for _, p := range []string{"LOADING", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "BUSY", "READONLY"} {
			if strings.HasPrefix(msg, p+" ") || msg == p {
				return true
			}
		}
	}
	return false
}

// JetStream API error codes (nats-server jetstream_errors_generated.go)
// that a cluster answers while it elects leaders or lacks a quorum.
const (
	jsClusterIncomplete jetstream.ErrorCode = 10004 // incomplete results
	jsClusterNoPeers    jetstream.ErrorCode = 10005 // e.g. "no suitable peers for placement"
	jsClusterNotAvail   jetstream.ErrorCode = 10008 // JetStream system temporarily unavailable
	jsClusterNotLeader  jetstream.ErrorCode = 10009 // JetStream cluster can not handle request
)

// jsUnavailable reports whether err is a JetStream API answer that says
// the cluster cannot serve the request for now: no meta or stream leader
// (an election, a lost quorum, a node cut off) or too few peers to place
// replicas on. Both clients' API error types are recognised.
func jsUnavailable(err error) bool {
	var code jetstream.ErrorCode
	var desc string
	var jsErr *jetstream.APIError
	var natsErr *nats.APIError
	switch {
	case errors.As(err, &jsErr):
		code, desc = jsErr.ErrorCode, jsErr.Description
	case errors.As(err, &natsErr):
		code, desc = jetstream.ErrorCode(natsErr.ErrorCode), natsErr.Description
	default:
		return false
	}
	switch code {
	case jsClusterIncomplete, jsClusterNotAvail, jsClusterNotLeader:
		return true
	case jsClusterNoPeers:
		return strings.Contains(desc, "no suitable peers") || strings.Contains(desc, "no replacement peer")
	}
	return false
}

// Refused reports whether err is a refusal that waiting does not fix:
// credentials, permissions or certificates (see Transient).
func Refused(err error) bool { return err != nil && permanent(err) }

// permanent reports whether err is a refusal that waiting does not fix:
// credentials, permissions or certificates.
func permanent(err error) bool {
	for _, p := range []error{
		nats.ErrAuthorization, nats.ErrAuthExpired, nats.ErrAuthRevoked, nats.ErrAccountAuthExpired,
		nats.ErrPermissionViolation, nats.ErrSecureConnRequired, nats.ErrSecureConnWanted,
	} {
		if errors.Is(err, p) {
			return true
		}
	}
	var (
		verify   *tls.CertificateVerificationError
		alert    tls.AlertError
		record   tls.RecordHeaderError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
	)
	if errors.As(err, &verify) || errors.As(err, &alert) || errors.As(err, &record) ||
		errors.As(err, &unknown) || errors.As(err, &hostname) || errors.As(err, &invalid) {
		return true
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		msg := rerr.Error()
		for _, p := range []string{"WRONGPASS", "NOAUTH", "NOPERM", "ERR AUTH", "ERR invalid password", "ERR Client sent AUTH"} {
			if strings.HasPrefix(msg, p) {
				return true
			}
		}
	}
	return false
}
