package dashboard

import (
	"bytes"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// svgDoc is what the test reads back of the chart.
type svgDoc struct {
	XMLName   xml.Name `xml:"svg"`
	Polylines []struct {
		Points string `xml:"points,attr"`
		Title  string `xml:"title"`
	} `xml:"polyline"`
	Texts []string `xml:"text"`
}

func TestWriteChartDrawsEverySeries(t *testing.T) {
	samples := []Sample{
		{T: 0, Backlog: 900, LedgerEntries: 0, Windows: 0},
		{T: 0.2, Backlog: 400, LedgerEntries: 350, Windows: 4, Corrections: 2, Late: 1},
		{T: 0.4, Backlog: 0, LedgerEntries: 800, Windows: 9, Corrections: 5, Late: 3},
	}
	var a, b bytes.Buffer
	if err := WriteChart(&a, samples); err != nil {
		t.Fatal(err)
	}
	if err := WriteChart(&b, samples); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("two charts of the same samples differ")
	}
	var doc svgDoc
	if err := xml.Unmarshal(a.Bytes(), &doc); err != nil {
		t.Fatalf("not XML: %v\n%s", err, a.String())
	}
	want := map[string]bool{"ledger entries": false, "windows": false, "backlog": false, "counted as corrections": false, "routed to LATE": false}
	for _, p := range doc.Polylines {
		if _, ok := want[p.Title]; !ok {
			t.Errorf("unexpected series %q", p.Title)
		}
		want[p.Title] = true
		if n := len(strings.Fields(p.Points)); n != len(samples) {
			t.Errorf("%s has %d points, want %d", p.Title, n, len(samples))
		}
	}
	for name, seen := range want {
		if !seen {
			t.Errorf("series %q not drawn", name)
		}
	}
	text := strings.Join(doc.Texts, "|")
	for _, s := range []string{"ledger entries (peak 800, end 800)", "backlog (peak 900, end 0)", "routed to LATE (peak 3, end 3)", "0.4s", "1000"} {
		if !strings.Contains(text, s) {
			t.Errorf("chart text lacks %q: %s", s, text)
		}
	}
}

func TestWriteChartWithoutSamples(t *testing.T) {
	dir := t.TempDir()
	if err := WriteChartFile(dir, nil); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, ChartFile))
	if err != nil {
		t.Fatal(err)
	}
	var doc svgDoc
	if err := xml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Polylines) != 0 || !strings.Contains(string(b), "no samples") {
		t.Fatalf("empty chart: %s", b)
	}
}

func TestNiceCeil(t *testing.T) {
	for in, want := range map[float64]float64{0: 1, 0.5: 1, 1: 1, 3: 5, 7: 10, 10: 10, 11: 20, 230: 500, 999: 1000, 1001: 2000} {
		if got := niceCeil(in); got != want {
			t.Errorf("niceCeil(%v) = %v, want %v", in, got, want)
		}
	}
}
