package validator

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// counterValues reads every series of the counter family name in reg, by
// the value of its label label.
func counterValues(t *testing.T, reg *prometheus.Registry, name, label string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label {
					out[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// TestMessagesInCountsEveryMessageByKind (issue 26, metric names):
// receiptflow_validator_messages_in_total counts every RAW message the
// validator handled, records (valid or rejected) and heartbeats, by kind.
// Before, only heartbeats were ever counted.
func TestMessagesInCountsEveryMessageByKind(t *testing.T) {
	reg := prometheus.NewRegistry()
	r := newRigWith(t, 0, reg)
	hb := stream.NewMsg(r.names.Subject(wire.Raw, 0), "hb-in-1", nil)
	hb.Header.Set(wire.HdrHeartbeat, "1764670000000")
	if _, err := r.js.PublishMsg(r.ctx, hb); err != nil {
		t.Fatal(err)
	}
	r.publish(record("in-1"), []byte(`{"schema_version":2,`), record("in-2"))
	if err := r.handle(r.fetch(4)); err != nil {
		t.Fatal(err)
	}
	got := counterValues(t, reg, "receiptflow_validator_messages_in_total", "kind")
	want := map[string]float64{"record": 3, "heartbeat": 1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("messages_in_total by kind %v, want %v (two valid records, one malformed, one heartbeat)", got, want)
	}
	out := counterValues(t, reg, "receiptflow_validator_messages_out_total", "outcome")
	if out["valid"] != 2 || out["rejected_malformed_json"] != 1 {
		t.Errorf("messages_out_total by outcome %v, want valid 2 and rejected_malformed_json 1", out)
	}
}
