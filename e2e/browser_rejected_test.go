package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/ingest"
	"github.com/receiptflow/receiptflow/pkg/testenv"
)

// sendRaw publishes one record line as it is (valid or not) and waits
// for its ack.
func (r *browserRig) sendRaw(line string) {
	r.t.Helper()
	testenv.CheckFor(r.t, 20*time.Second, 100*time.Millisecond, func() error {
		in := ingest.New(r.p.Admin.JS, ingest.Config{Partitions: 2, Validator: r.p.Validator, HeartbeatEvery: 1})
		ctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
		defer cancel()
		if err := in.Publish(ctx, []byte(line)); err != nil {
			in.Close(ctx)
			return err
		}
		return in.Close(ctx)
	})
}

// rejectedShown is the condition that the health panel's Rejected row
// shows total records rejected, malformed_json and unknown_type of them
// as given (issue 26, papercut 9: rejected records appeared nowhere on
// the page).
func rejectedShown(total, malformed, unknown string) string {
	return `(() => { const dd = document.getElementById('h-rejected'); if (!dd) return false;
		const n = (r) => (dd.querySelector('.badge.rejected[data-reason="' + r + '"]') || {}).textContent;
		return dd.dataset.total === '` + total + `' && n('malformed_json') === 'malformed_json ` + malformed + `' &&
			n('unknown_type') === 'unknown_type ` + unknown + `' && dd.textContent.includes('` + total + ` records rejected in all'); })()`
}

// checkRejected sends two malformed records and one of an unknown type
// and waits for the health panel to count them by reason.
func checkRejected(t *testing.T, rig *browserRig, b *browser) {
	at := time.Now().UTC().Add(-2 * time.Hour).Format(time.RFC3339)
	rig.sendRaw(`{"schema_version": 2, "event_id": "browser-bad-1"`)
	rig.sendRaw(`{"schema_version": 2, "event_id": "browser-bad-2"`)
	rig.sendRaw(`{"schema_version":2,"event_id":"browser-refund","receipt_id":"r-1","type":"refunded","occurred_at":"` + at +
		`","partition_key":"store-1","producer_version":"e2e/browser"}`)
	b.waitFor(10*time.Second, "rejected records by reason in the health panel", rejectedShown("3", "2", "1"),
		`document.getElementById('h-rejected')?.outerHTML + '\n/api/health: ' + `+browserFetch("/api/health"))
	b.elementShot("rejected", "section.health-card")
}
