package dashboard

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ChartFile is the name of the chart WriteChartFile writes beside
// metrics.json and parity.md.
const ChartFile = "metrics.svg"

// chartSeries is one line of a chart panel.
type chartSeries struct {
	name  string
	color string
	value func(Sample) float64
}

// chartPanel is one band of the chart with its own y axis.
type chartPanel struct {
	title  string
	series []chartSeries
}

var chartPanels = []chartPanel{
	{"State size: ledger entries in Redis", []chartSeries{
		{"ledger entries", "#1f77b4", func(s Sample) float64 { return float64(s.LedgerEntries) }},
	}},
	{"State size: windows held in Redis", []chartSeries{
		{"windows", "#17becf", func(s Sample) float64 { return float64(s.Windows) }},
	}},
	{"Backlog: messages pending or unacknowledged, all consumers", []chartSeries{
		{"backlog", "#ff7f0e", func(s Sample) float64 { return float64(s.Backlog) }},
	}},
	{"Correction volume (cumulative)", []chartSeries{
		{"counted as corrections", "#2ca02c", func(s Sample) float64 { return float64(s.Corrections) }},
		{"routed to LATE", "#d62728", func(s Sample) float64 { return float64(s.Late) }},
	}},
}

// Chart geometry, in SVG user units.
const (
	chartWidth  = 760
	chartLeft   = 70 // room for y labels
	chartRight  = 20
	panelHeight = 110
	panelGap    = 44 // title and x labels
	chartTop    = 40
)

// WriteChart draws samples (metrics.json's time series of a run) as an SVG
// image to w: one band per quantity (ledger entries, windows held, backlog,
// correction volume), sharing the time axis in seconds since the run
// began. It is deterministic: the same samples give the same bytes. With
// no samples it draws the empty axes and says so. It returns w's error.
func WriteChart(w io.Writer, samples []Sample) error {
	bw := bufio.NewWriter(w)
	height := chartTop + len(chartPanels)*(panelHeight+panelGap) + 10
	fmt.Fprintf(bw, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n",
		chartWidth, height, chartWidth, height)
	fmt.Fprintf(bw, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", chartWidth, height)
	tMax := 0.0
	for _, s := range samples {
		tMax = math.Max(tMax, s.T)
	}
	title := fmt.Sprintf("receiptflow run: %d samples over %ss", len(samples), num(tMax))
	if len(samples) == 0 {
		title = "receiptflow run: no samples recorded"
	}
	fmt.Fprintf(bw, `<text x="%d" y="22" font-size="14" font-weight="bold">%s</text>`+"\n", chartLeft, html.EscapeString(title))
	plotW := float64(chartWidth - chartLeft - chartRight)
	xOf := func(t float64) float64 {
		if tMax <= 0 {
			return chartLeft
		}
		return chartLeft + t/tMax*plotW
	}
	for i, p := range chartPanels {
		top := float64(chartTop + i*(panelHeight+panelGap) + 16)
		bottom := top + panelHeight
		yMax := 0.0
		for _, s := range samples {
			for _, se := range p.series {
				yMax = math.Max(yMax, se.value(s))
			}
		}
		yMax = niceCeil(yMax)
		yOf := func(v float64) float64 { return bottom - v/yMax*panelHeight }

		fmt.Fprintf(bw, `<text x="%d" y="%s" font-weight="bold">%s</text>`+"\n", chartLeft, num(top-6), html.EscapeString(p.title))
		// Grid and y labels at 0, 1/2 and the top.
		for _, f := range []float64{0, 0.5, 1} {
			y := bottom - f*panelHeight
			fmt.Fprintf(bw, `<line x1="%d" y1="%s" x2="%d" y2="%s" stroke="#dddddd"/>`+"\n", chartLeft, num(y), chartWidth-chartRight, num(y))
			fmt.Fprintf(bw, `<text x="%d" y="%s" text-anchor="end">%s</text>`+"\n", chartLeft-6, num(y+4), num(f*yMax))
		}
		// x labels: 0, quarters, end.
		for _, f := range []float64{0, 0.25, 0.5, 0.75, 1} {
			x := chartLeft + f*plotW
			fmt.Fprintf(bw, `<text x="%s" y="%s" text-anchor="middle" fill="#555555">%ss</text>`+"\n", num(x), num(bottom+14), num(f*tMax))
		}
		fmt.Fprintf(bw, `<rect x="%d" y="%s" width="%s" height="%d" fill="none" stroke="#999999"/>`+"\n", chartLeft, num(top), num(plotW), panelHeight)
		// Series and legend.
		lx := float64(chartWidth - chartRight)
		for j := len(p.series) - 1; j >= 0; j-- {
			se := p.series[j]
			if len(samples) > 0 {
				var pts strings.Builder
				for k, s := range samples {
					if k > 0 {
						pts.WriteByte(' ')
					}
					pts.WriteString(num(xOf(s.T)) + "," + num(yOf(se.value(s))))
				}
				fmt.Fprintf(bw, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"><title>%s</title></polyline>`+"\n",
					se.color, pts.String(), html.EscapeString(se.name))
			}
			last, peak := 0.0, 0.0
			for _, s := range samples {
				last = se.value(s)
				peak = math.Max(peak, last)
			}
			label := fmt.Sprintf("%s (peak %s, end %s)", se.name, num(peak), num(last))
			lx -= float64(len(label))*6 + 24
			fmt.Fprintf(bw, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="3"/>`+"\n", num(lx), num(top-10), num(lx+14), num(top-10), se.color)
			fmt.Fprintf(bw, `<text x="%s" y="%s">%s</text>`+"\n", num(lx+18), num(top-6), html.EscapeString(label))
		}
		if len(samples) == 0 {
			fmt.Fprintf(bw, `<text x="%s" y="%s" text-anchor="middle" fill="#999999">no samples</text>`+"\n", num(chartLeft+plotW/2), num(top+panelHeight/2))
		}
	}
	bw.WriteString("</svg>\n")
	return bw.Flush()
}

// WriteChartFile writes WriteChart's image of samples to dir/metrics.svg.
func WriteChartFile(dir string, samples []Sample) error {
	f, err := os.Create(filepath.Join(dir, ChartFile))
	if err != nil {
		return err
	}
	if err := WriteChart(f, samples); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten (at least 1).
func niceCeil(v float64) float64 {
	if v <= 1 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// num formats v with at most one decimal, without a trailing ".0".
func num(v float64) string {
	return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64)
}

// Sample is one point of metrics.json.
type Sample struct {
	T             float64 `json:"t"`
	Backlog       uint64  `json:"backlog"`
	LedgerEntries int64   `json:"ledger_entries"`
	Windows       int64   `json:"windows"`
	Corrections   int64   `json:"corrections"`
	Late          int64   `json:"late"`
	RedisBytes    int64   `json:"redis_bytes,omitempty"`
}
