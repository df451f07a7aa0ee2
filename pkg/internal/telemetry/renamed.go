package telemetry

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Renamed returns a collector that exports every gauge, counter and
// histogram c collects a second time under the metric's former name old,
// with the variable labels labels (c's, in any order) and a help text
// saying it is deprecated in favour of newName. A rename registers it
// beside c for one release (CHANGELOG.md); safe for concurrent use.
func Renamed(c prometheus.Collector, old, newName string, labels ...string) prometheus.Collector {
	return &renamed{c: c, labels: labels, desc: prometheus.NewDesc(old,
		"Deprecated: renamed to "+newName+", which has the same value; this name is removed in the next release (CHANGELOG.md).",
		labels, nil)}
}

var errUnsupported = errors.New("telemetry: only gauges, counters and histograms can be renamed")

type renamed struct {
	c      prometheus.Collector
	desc   *prometheus.Desc
	labels []string
}

func (r *renamed) Describe(ch chan<- *prometheus.Desc) { ch <- r.desc }

func (r *renamed) Collect(ch chan<- prometheus.Metric) {
	in := make(chan prometheus.Metric)
	go func() {
		r.c.Collect(in)
		close(in)
	}()
	for m := range in {
		ch <- r.copyOf(m)
	}
}

// copyOf is m under the former name.
func (r *renamed) copyOf(m prometheus.Metric) prometheus.Metric {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		return prometheus.NewInvalidMetric(r.desc, err)
	}
	byName := map[string]string{}
	for _, l := range d.GetLabel() {
		byName[l.GetName()] = l.GetValue()
	}
	values := make([]string, len(r.labels))
	for i, l := range r.labels {
		values[i] = byName[l]
	}
	var (
		out prometheus.Metric
		err error
	)
	switch {
	case d.Gauge != nil:
		out, err = prometheus.NewConstMetric(r.desc, prometheus.GaugeValue, d.GetGauge().GetValue(), values...)
	case d.Counter != nil:
		out, err = prometheus.NewConstMetric(r.desc, prometheus.CounterValue, d.GetCounter().GetValue(), values...)
	case d.Histogram != nil:
		h := d.GetHistogram()
		buckets := make(map[float64]uint64, len(h.GetBucket()))
		for _, b := range h.GetBucket() {
			buckets[b.GetUpperBound()] = b.GetCumulativeCount()
		}
		out, err = prometheus.NewConstHistogram(r.desc, h.GetSampleCount(), h.GetSampleSum(), buckets, values...)
	default:
		return prometheus.NewInvalidMetric(r.desc, errUnsupported)
	}
	if err != nil {
		return prometheus.NewInvalidMetric(r.desc, err)
	}
	return out
}
