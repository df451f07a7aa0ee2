package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
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
}

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
			case strings.HasPrefix(rest, "_sum "):
				kind = "sum"
			case strings.HasPrefix(rest, "_count "):
				kind = "count"
			default:
				continue
			}
			v, err := strconv.ParseFloat(strings.TrimSpace(rest[strings.IndexByte(rest, ' '):]), 64)
			if err != nil {
				continue
			}
			m := out[h]
			if kind == "sum" {
				m.Sum += v
			} else {
				m.Count += v
			}
			out[h] = m
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
					x := out[f.GetName()]
					x.Sum += h.GetSampleSum()
					x.Count += float64(h.GetSampleCount())
					out[f.GetName()] = x
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
