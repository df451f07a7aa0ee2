package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/pipeline"
	"github.com/receiptflow/receiptflow/pkg/testenv"
)

// TestWatermarkAheadOfClockWarned (issue 14, papercut 8): with a
// --max-future-skew wider than the lateness, a future-dated input can move
// a partition's watermark past the clock, and windows then turn final
// before their hour has passed. The publisher says so: in meta.health
// (watermark_ahead_ms, the partitions), in a gauge, and the page shows a
// "watermark ahead of clock" badge on the health panel. Before, nothing
// did: the health had no such field and the page showed the watermark as
// any other.
func TestWatermarkAheadOfClockWarned(t *testing.T) {
	chromium := browserChromium(t)
	reg := prometheus.NewRegistry()
	rig := browserStartRig(t, time.Minute, func(c *pipeline.Config) {
		c.Contract = contract.Config{MaxFutureSkew: 2 * time.Hour}
		c.Registerer = reg
	})
	// An hour ahead: the watermark (max event time − 5 min lateness) is
	// about 55 minutes ahead of the clock.
	rig.send(time.Now().UTC().Add(time.Hour))

	var h HealthAhead
	testenv.CheckFor(t, 20*time.Second, 100*time.Millisecond, func() error {
		h = HealthAhead{}
		resp, err := http.Get(rig.base + "/api/health")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
			return err
		}
		if h.Health == nil || h.Health.WatermarkAheadMs <= 0 {
			return errNotYet("health says no watermark is ahead of the clock")
		}
		return nil
	})
	if ahead := time.Duration(h.Health.WatermarkAheadMs) * time.Millisecond; ahead < 50*time.Minute || ahead > 56*time.Minute {
		t.Errorf("watermark ahead of clock by %s, want about 55m", ahead)
	}
	if len(h.Health.AheadPartitions) == 0 {
		t.Errorf("no partition named as ahead: %+v", h.Health)
	}

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var gauge *dto.Metric
	for _, mf := range mfs {
		if mf.GetName() == "receiptflow_publisher_watermark_ahead_of_clock_seconds" && len(mf.GetMetric()) == 1 {
			gauge = mf.GetMetric()[0]
		}
	}
	if gauge == nil {
		t.Fatal("no receiptflow_publisher_watermark_ahead_of_clock_seconds gauge")
	}
	if v := gauge.GetGauge().GetValue(); v < 50*60 || v > 56*60 {
		t.Errorf("ahead-of-clock gauge %.0f s, want about 3300", v)
	}

	b := browserStart(t, chromium)
	b.navigate(rig.base + "/")
	b.waitFor(10*time.Second, "ahead badge", `(document.getElementById('h-ahead')?.textContent || '').includes('watermark ahead of clock')`,
		`document.getElementById('health')?.outerHTML || document.body.outerHTML.slice(0, 2000)`)
	text := browserMust[string](b, `document.getElementById('h-ahead').textContent`)
	if !strings.Contains(text, "p") {
		t.Errorf("badge %q does not name the partitions", text)
	}
	b.screenshot("watermark-ahead")
}

// HealthAhead is the part of /api/health this test reads.
type HealthAhead struct {
	Health *struct {
		WatermarkAheadMs int64 `json:"watermark_ahead_ms"`
		AheadPartitions  []int `json:"watermark_ahead_partitions"`
	} `json:"health"`
}

type errNotYet string

func (e errNotYet) Error() string { return string(e) }
