package service

import "github.com/receiptflow/receiptflow/pkg/wire"

// Consumer names one durable consumer a service runs.
type Consumer struct{ Stream, Durable string }

// Consumers returns the durable consumers service name of generation n
// runs over the partitions owned: validator and windower one per
// partition, the publisher one over every partition, other names none.
func Consumers(name string, n wire.Names, owned []int) []Consumer {
	switch name {
	case Validator, Windower:
		src := wire.Raw
		if name == Windower {
			src = wire.Valid
		}
		out := make([]Consumer, 0, len(owned))
		for _, p := range owned {
			out = append(out, Consumer{Stream: n.Stream(src), Durable: n.ServiceDurable(name, p)})
		}
		return out
	case Publisher:
		return []Consumer{{Stream: n.Stream(wire.Changes), Durable: n.ServiceDurable(name, -1)}}
	}
	return nil
}
