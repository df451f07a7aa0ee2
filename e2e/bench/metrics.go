package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// histograms are the service histograms the bench reports as means: how
// large the batches were and how long the apply script took.
var histograms = []string{
	"receiptflow_validator_batch_size_messages",
	"receiptflow_windower_batch_size_messages",
	"receiptflow_windower_script_seconds",
	stepsWindower,
	stepsPublisher,
}

// The services' per-batch step histograms (label step): a labelled
// series is kept under its name and labels, as the exposition writes
// them (stepKey).
const (
	stepsWindower  = "receiptflow_windower_batch_step_seconds"
	stepsPublisher = "receiptflow_publisher_batch_step_seconds"
)

// stepKey is where step's series of histogram name is kept.
func stepKey(name, step string) string { return name + `{step="` + step + `"}` }

// counters are the service counters the bench reads, summed over their
// labels and instances (into histMean.Sum): the time partitions waited at
// the validator's publication barrier.
var counters = []string{
	"receiptflow_validator_barrier_wait_seconds_total",
}

// histMean is a histogram's sum and count summed over instances.
type histMean struct{ Sum, Count float64 }

func (h histMean) mean() float64 {
	if h.Count == 0 {
		return 0
	}
	return h.Sum / h.Count
}

// scrapeProcesses reads the histograms from every service process's
// /metrics (its address is in its log).
func scrapeProcesses(ctx context.Context, logDir string, names []string) map[string]histMean {
	out := map[string]histMean{}
	for _, name := range names {
		addr := httpAddr(filepath.Join(logDir, name+".log"))
		if addr == "" {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		req, _ := http.NewRequestWithContext(rctx, http.MethodGet, "http://"+addr+"/metrics", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			addText(out, resp.Body)
			resp.Body.Close()
		}
		cancel()
	}
	return out
}

// httpAddr finds the "http listening" line of a service log.
func httpAddr(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var l struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == "http listening" {
			return l.Addr
		}
	}
	return ""
}

// addText adds the _sum and _count samples of the histograms from a
// Prometheus text exposition.
func addText(out map[string]histMean, r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for _, c := range counters {
			rest, ok := strings.CutPrefix(line, c)
			if !ok || (len(rest) > 0 && rest[0] != '{' && rest[0] != ' ') {
				continue
			}
			if v, err := strconv.ParseFloat(strings.TrimSpace(rest[strings.LastIndexByte(rest, ' '):]), 64); err == nil {
				m := out[c]
				m.Sum += v
				out[c] = m
			}
		}
		for _, h := range histograms {
			rest, ok := strings.CutPrefix(line, h)
			if !ok {
				continue
			}
			var kind string
			switch {
			case strings.HasPrefix(rest, "_sum"):
				kind, rest = "sum", rest[len("_sum"):]
			case strings.HasPrefix(rest, "_count"):
				kind, rest = "count", rest[len("_count"):]
			default:
				continue
			}
			key := h
			if strings.HasPrefix(rest, "{") {
				end := strings.IndexByte(rest, '}')
				if end < 0 {
					continue
				}
				key, rest = h+rest[:end+1], rest[end+1:]
			}
			if !strings.HasPrefix(rest, " ") {
				continue
			}
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				continue
			}
			m := out[key]
			if kind == "sum" {
				m.Sum += v
			} else {
				m.Count += v
			}
			out[key] = m
		}
	}
}

// gatherRegistries reads the histograms from in-process registries.
func gatherRegistries(regs []*prometheus.Registry) map[string]histMean {
	out := map[string]histMean{}
	for _, reg := range regs {
		fams, err := reg.Gather()
		if err != nil {
			continue
		}
		for _, f := range fams {
			for _, m := range f.GetMetric() {
				if c := m.GetCounter(); c != nil && slices.Contains(counters, f.GetName()) {
					x := out[f.GetName()]
					x.Sum += c.GetValue()
					out[f.GetName()] = x
				}
				if h := m.GetHistogram(); h != nil {
					key := f.GetName()
					if ls := m.GetLabel(); len(ls) > 0 {
						parts := make([]string, len(ls))
						for i, l := range ls {
							parts[i] = l.GetName() + `="` + l.GetValue() + `"`
						}
						key += "{" + strings.Join(parts, ",") + "}"
					}
					x := out[key]
					x.Sum += h.GetSampleSum()
					x.Count += float64(h.GetSampleCount())
					out[key] = x
				}
			}
		}
	}
	return out
}

// describeBatches renders the means for the table.
func describeBatches(m map[string]histMean) string {
	if len(m) == 0 {
		return "no service metrics"
	}
	return fmt.Sprintf("mean batch: validator %.1f, windower %.1f; apply script %.2f ms",
		m["receiptflow_validator_batch_size_messages"].mean(), m["receiptflow_windower_batch_size_messages"].mean(),
		1000*m["receiptflow_windower_script_seconds"].mean())
}

// stepMean is one step's mean time per batch, in ms.
type stepMean struct {
	svc, step string
	ms        float64
}

// stepMeansOf lists the mean time of each step of the windower's and the
// publisher's batches that m holds, in stepServices' order.
func stepMeansOf(m map[string]histMean) []stepMean {
	var out []stepMean
	for _, svc := range stepServices {
		for _, step := range svc.steps {
			if h, ok := m[stepKey(svc.hist, step)]; ok && h.Count > 0 {
				out = append(out, stepMean{svc.name, step, 1000 * h.mean()})
			}
		}
	}
	return out
}

// stepMeans is stepMeansOf for the JSON results, keyed "windower.apply",
// "publisher.read", ... (ms to the µs).
func stepMeans(m map[string]histMean) map[string]any {
	out := map[string]any{}
	for _, s := range stepMeansOf(m) {
		out[s.svc+"."+s.step] = math.Round(1000*s.ms) / 1000
	}
	return out
}

// stepServices are the services whose batch steps the bench reports.
var stepServices = []struct {
	name, hist string
	steps      []string
}{
	{"windower", stepsWindower, []string{"wait", "apply", "publish", "mark"}},
	{"publisher", stepsPublisher, []string{"wait", "read", "put", "rollup"}},
}

// describeSteps renders stepMeansOf for the table (empty without steps).
func describeSteps(m map[string]histMean) string {
	var parts []string // one per service
	svc := ""
	for _, s := range stepMeansOf(m) {
		item := fmt.Sprintf("%s %.1f", s.step, s.ms)
		if s.svc != svc {
			parts, svc = append(parts, s.svc+" "+item), s.svc
		} else {
			parts[len(parts)-1] += ", " + item
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return strings.Join(parts, "; ") + " (ms, mean per batch)"
}
