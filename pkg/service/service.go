package service

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/receiptflow/receiptflow/pkg/config"
	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/failpoint"
	"github.com/receiptflow/receiptflow/pkg/ledger"
	"github.com/receiptflow/receiptflow/pkg/publisher"
	"github.com/receiptflow/receiptflow/pkg/validator"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/windower"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// Names of the services Build wires.
const (
	Validator = "validator"
	Windower  = "windower"
	Publisher = "publisher"
)

// Runner is a service: Run blocks until ctx ends or the service fails.
type Runner interface {
	Run(ctx context.Context) error
}

var (
	_ Runner = (*validator.Service)(nil)
	_ Runner = (*windower.Service)(nil)
	_ Runner = (*publisher.Service)(nil)
)

// Params are the deployment's parameters the services read; every
// instance of a deployment must be given the same.
type Params struct {
	Partitions int
	HotKeys    window.HotKeys
	Lateness   time.Duration
	Grace      time.Duration
	// ReplayHorizon is the ledger's retirement horizon (0: keep all).
	ReplayHorizon time.Duration
	// SourceIdle is docs/spec.md §3.1's --source-idle.
	SourceIdle time.Duration
	StaleAfter time.Duration
	// WindowRetention and DayRetention are the publisher's (0: its
	// defaults).
	WindowRetention, DayRetention time.Duration
	Waits                         config.Waits
}

// ParamsOf returns the parameters the shared flags set.
func ParamsOf(c *config.Common) Params {
	return Params{
		Partitions: c.Partitions, HotKeys: c.Hot(), Lateness: c.Lateness, Grace: c.Grace,
		ReplayHorizon: c.ReplayHorizon, SourceIdle: c.SourceIdle, StaleAfter: c.StaleAfter,
		WindowRetention: c.WindowRetention, DayRetention: c.DayRetention, Waits: c.Waits(),
	}
}

// Deps is what Build needs to wire one service instance.
type Deps struct {
	Params
	Names wire.Names
	// Owned lists the partitions this instance processes (nil: all).
	Owned []int
	// Epochs holds the fencing token of each owned partition (its lease's
	// epoch); nil or a zero token: not fenced (static --instance/--instances).
	Epochs map[int]uint64
	JS     jetstream.JetStream
	// Redis is the client of the instance's ledger store (NewStore).
	Redis      ledger.Client
	Validator  *contract.Validator
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	Failpoints *failpoint.Set
	// Trace receives the windower's decisions (windower.Config.Trace).
	Trace func(p int, recs []windower.Trace)
	// PublisherTick, HistoryEvery and KeepHistory tune the publisher of an
	// in-process run (publisher.Config; zero: its defaults).
	PublisherTick, HistoryEvery time.Duration
	KeepHistory                 bool
}

// NewStore returns the ledger store of generation n with the deployment's
// lateness, grace and replay horizon. It does no I/O.
func NewStore(rdb ledger.Client, n wire.Names, p Params) *ledger.Store {
	return ledger.NewStore(rdb, ledger.Config{Keys: ledger.Keys{Prefix: n.RedisPrefix()}, Lateness: p.Lateness, Grace: p.Grace, Horizon: p.ReplayHorizon, SourceIdle: p.SourceIdle})
}

// Build returns the service called name wired from d. It does no I/O; an
// unknown name is an error.
func Build(name string, d Deps) (Runner, error) {
	store := NewStore(d.Redis, d.Names, d.Params)
	w := d.Waits
	switch name {
	case Validator:
		return validator.New(d.JS, store, validator.Config{
			Names: d.Names, Partitions: d.Partitions, HotKeys: d.HotKeys, Owned: d.Owned, Epochs: d.Epochs, Validator: d.Validator,
			Logger: d.Logger, Registerer: d.Registerer, Failpoints: d.Failpoints,
			IdleEvery: w.BarrierIdle, BarrierPoll: w.BarrierPoll, Linger: w.ConsumeLinger,
		}), nil
	case Windower:
		return windower.New(d.JS, store, windower.Config{
			Names: d.Names, Partitions: d.Partitions, Owned: d.Owned, Epochs: d.Epochs,
			Logger: d.Logger, Registerer: d.Registerer, Failpoints: d.Failpoints, Trace: d.Trace,
			Linger: w.ConsumeLinger,
		}), nil
	case Publisher:
		return publisher.New(d.JS, store, publisher.Config{
			Names: d.Names, Partitions: d.Partitions, Grace: d.Grace, StaleAfter: d.StaleAfter,
			Tick: d.PublisherTick, Linger: w.PublishLinger,
			Logger: d.Logger, Registerer: d.Registerer, Failpoints: d.Failpoints,
			WindowRetention: d.WindowRetention, DayRetention: d.DayRetention,
			KeepHistory: d.KeepHistory, HistoryEvery: d.HistoryEvery,
		}), nil
	}
	return nil, fmt.Errorf("service: unknown service %q (want %s, %s or %s)", name, Validator, Windower, Publisher)
}
