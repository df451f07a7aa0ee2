package daemon

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/config"
	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// adopt takes the deployment's parameters recorded on RAW into c
// (config.Common.AdoptRecorded), waiting while NATS is away. A flag given
// with another value than the record ends it with an error naming both.
func (w waiter) adopt(ctx context.Context, js jetstream.JetStream, c *config.Common, explicit func(string) bool, refused *refusals) error {
	return w.until(ctx, "the deployment's parameters", wire.Raw, func(ctx context.Context) error {
		ctx, cancel := refused.context(ctx, 10*time.Second)
		defer cancel()
		return refused.or(c.AdoptRecorded(ctx, js, explicit))
	})
}

// adopt is waiter.adopt, then configure.
func (d *Deps) adopt(ctx context.Context, w waiter, c *config.Common, o options, explicit func(string) bool, refused *refusals) error {
	if err := w.adopt(ctx, d.NATS.JS, c, explicit, refused); err != nil {
		return err
	}
	return d.configure(*c, o)
}

// configure sets what Deps derives from the (adopted) configuration c:
// the partitions this instance owns and the record validator.
func (d *Deps) configure(c config.Common, o options) error {
	d.Common = c
	var err error
	if d.Owned, err = config.ParseOwned(o.owned, c.Partitions); err != nil {
		return err
	}
	if d.Owned == nil {
		d.Owned = config.Split(c.Partitions, o.instance, o.instances)
	}
	d.Validator, err = contract.NewValidator(c.Contract())
	return err
}
