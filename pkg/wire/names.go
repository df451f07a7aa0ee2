package wire

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Stream names of docs/spec.md §1. RAW is shared by every generation; the
// derived streams of a generation other than DefaultGeneration carry the
// generation as a suffix (VALID_2).
const (
	Raw      = "RAW"
	Valid    = "VALID"
	Rejected = "REJECTED"
	Late     = "LATE"
	Changes  = "CHANGES"
)

// DefaultGeneration is the live generation of a fresh deployment.
// Describe is the description of stream base (Raw, Valid, ...) that the
// set-up gives it, for operators listing streams (nats stream ls).
func Describe(base string) string {
	switch base {
	case Raw:
		return "receiptflow: every record as ingest published it, one subject per partition, with heartbeats"
	case Valid:
		return "receiptflow: the records the validator accepted, in frames, one subject per partition"
	case Rejected:
		return "receiptflow: the records the validator rejected, with reason and RAW sequence"
	case Late:
		return "receiptflow: submissions routed away from a window: after its grace, or retired"
	case Changes:
		return "receiptflow: the windower's notices of changed windows, read by the publisher"
	}
	return "receiptflow: " + base
}

// DescribeBucket is the description the set-up gives KV bucket b.
func DescribeBucket(b string) string {
	if b == ControlBucket {
		return "receiptflow: which state generation readers follow (meta.generation)"
	}
	if strings.HasPrefix(b, leaseBucketPrefix) {
		return "receiptflow: members of the validator and windower groups and their partition leases (pkg/lease) of one state generation"
	}
	return "receiptflow: window snapshots and pipeline health (meta.*) of one state generation"
}

const DefaultGeneration = "1"

// ControlBucket is the KV bucket holding the active-generation pointer
// (key ActiveKey) that readers follow.
const ControlBucket = "receipts"

// ActiveKey is the key of the active-generation pointer in ControlBucket.
const ActiveKey = "meta.generation"

// Names are the stream, subject, bucket and Redis names of one generation.
type Names struct {
	Generation string
}

// For returns the Names of generation gen ("" means DefaultGeneration).
func For(gen string) Names {
	if gen == "" {
		gen = DefaultGeneration
	}
	return Names{Generation: gen}
}

func (n Names) suffix() string {
	if n.Generation == DefaultGeneration {
		return ""
	}
	return "_" + n.Generation
}

// Stream returns the name of base (Valid, Rejected, Late, Changes) for this
// generation; Raw is the same for all generations.
func (n Names) Stream(base string) string {
	if base == Raw {
		return Raw
	}
	return base + n.suffix()
}

// Subject returns the subject of partition p in stream base, e.g. rf.raw.3
// or rf.g2.valid.3. REJECTED has a single subject (p is ignored).
func (n Names) Subject(base string, p int) string {
	return n.prefix(base) + "." + strconv.Itoa(p)
}

// Wildcard returns the subject filter of every partition of stream base.
func (n Names) Wildcard(base string) string { return n.prefix(base) + ".*" }

func (n Names) prefix(base string) string {
	lower := map[string]string{Raw: "raw", Valid: "valid", Rejected: "rejected", Late: "late", Changes: "changes"}[base]
	if base == Raw || n.Generation == DefaultGeneration {
		return "rf." + lower
	}
	return "rf.g" + n.Generation + "." + lower
}

// Bucket is the KV bucket of this generation's window snapshots and health.
func (n Names) Bucket() string { return "receipts-" + n.Generation }

const leaseBucketPrefix = "receipts-leases-"

// LeaseMarkerTTL is how long the lease bucket keeps the marker that ends
// a holding, by expiry (the bucket's LimitMarkerTTL) or by release (the
// purge's TTL): long after any lease period, so a watcher that lagged by
// more than a TTL still sees the partition freed.
const LeaseMarkerTTL = time.Minute

// LeaseBucket is the KV bucket of this generation's validator and windower
// groups: members and partition leases (pkg/lease).
func (n Names) LeaseBucket() string { return leaseBucketPrefix + n.Generation }

// RedisPrefix is the prefix of every Redis key of this generation.
func (n Names) RedisPrefix() string { return "rf:" + n.Generation + ":" }

// ParamKey is the RAW stream metadata key under which this generation's
// parameter name (a flag name, e.g. grace) is recorded: rf.1.grace.
func (n Names) ParamKey(name string) string { return "rf." + n.Generation + "." + name }

// WindowKeyPrefix starts the KV key of every window snapshot.
const WindowKeyPrefix = "window."

// WindowKey is the KV key of a window snapshot.
func WindowKey(windowID string) string { return WindowKeyPrefix + windowID }

// HealthKey is the KV key of the publisher's Health report. The publisher
// also writes parts of it under meta.watermark, meta.backlog, meta.state,
// meta.late, meta.corrections, meta.source and meta.generation.
const HealthKey = "meta.health"

// ServiceNames are the services that hold the pipeline's durable
// consumers, in pipeline order: the validator (RAW, one per partition),
// the windower (VALID, one per partition) and the publisher (CHANGES).
var ServiceNames = []string{"validator", "windower", "publisher"}

// ServiceDurable is the durable consumer name of service svc of this
// generation for partition p (p < 0: a consumer over every partition):
// validator-p3, or validator-g2-p3 in generation 2.
func (n Names) ServiceDurable(svc string, p int) string {
	if n.Generation != DefaultGeneration {
		svc += "-g" + n.Generation
	}
	return Durable(svc, p)
}

// OwnsConsumer reports whether consumer is the durable consumer of one of
// the pipeline's services (ServiceNames) in this generation. Other
// consumers of the same streams (a replay's or a report's ordered
// consumer, an operator's `nats consumer add`) are not the pipeline's:
// their backlog is not the pipeline's backlog.
func (n Names) OwnsConsumer(consumer string) bool {
	for _, svc := range ServiceNames {
		base := n.ServiceDurable(svc, -1)
		if rest, ok := strings.CutPrefix(consumer, base); ok {
			if rest == "" {
				return true
			}
			if d, ok := strings.CutPrefix(rest, "-p"); ok && d != "" && strings.Trim(d, "0123456789") == "" {
				return true
			}
		}
	}
	return false
}

// Durable is the durable consumer name of service svc for partition p
// (p < 0: a consumer over every partition).
func Durable(svc string, p int) string {
	if p < 0 {
		return svc
	}
	return fmt.Sprintf("%s-p%d", svc, p)
}
