package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReadingTheDashboardCoversThePage (issue 14, papercut 14):
// docs/reading-the-dashboard.md explains every label the page can show —
// the connection pills, the badges, the health panel's items and the
// windows table's columns, taken from the page's own files — and every
// screenshot it shows exists. A label added to the page without a word in
// the doc fails here.
func TestReadingTheDashboardCoversThePage(t *testing.T) {
	root := repoRoot(t)
	read := func(rel string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	doc := read("docs/reading-the-dashboard.md")
	html := read("pkg/dashboard/web/index.html")
	js := read("pkg/dashboard/web/app.js")

	images := regexp.MustCompile(`!\[[^\]]*\]\(([^)]+)\)`).FindAllStringSubmatch(doc, -1)
	if len(images) < 3 {
		t.Errorf("%d screenshots in the doc, want at least 3 (the page, STALE, the phone)", len(images))
	}
	for _, m := range images {
		if fi, err := os.Stat(filepath.Join(root, "docs", m[1])); err != nil || fi.Size() == 0 {
			t.Errorf("screenshot %s: %v", m[1], err)
		}
	}

	var labels []string
	add := func(what string, re *regexp.Regexp, src string, min int) {
		found := re.FindAllStringSubmatch(src, -1)
		if len(found) < min {
			t.Errorf("%s: found %d in the page's files, want at least %d (did the page change shape?)", what, len(found), min)
		}
		for _, m := range found {
			labels = append(labels, strings.TrimSpace(m[1]))
		}
	}
	add("health items", regexp.MustCompile(`<dt>([^<]+)</dt>`), html, 9)
	add("table columns", regexp.MustCompile(`<th class="c-[a-z]+[^"]*">([^<]+)</th>`), html, 8)
	add("connection pills", regexp.MustCompile(`setPill\('\w+', '\w+', '([^']+)'\)`), js, 5)
	add("badges", regexp.MustCompile(`class: 'badge [a-z]+'[^}]*\}, '([^']+)'`), js, 5)
	add("chart marks", regexp.MustCompile(`class: '(?:zero|nodata)'[^}]*\}, '([^']+)'`), js, 2)
	add("legend", regexp.MustCompile(`<li><span class="sw [^"]+">[^<]*</span>([^<(]+)`), html, 6)
	add("cards", regexp.MustCompile(`<h2 id="[a-z-]+">([^<]+)</h2>`), html, 6)
	add("store columns", regexp.MustCompile(`<th(?: class="num")?>([a-z]+)</th>`), html[strings.Index(html, `id="stores"`):strings.Index(html, `id="partitions"`)], 5)
	labels = append(labels, "STALE", "watermark ahead of clock", "corrected +", "in grace", "0✓",
		"(unknown store)", "(newest with data)", "(picked)", "other store",
		"HISTORY", "live updates paused", "24 hours to", "windows held",
		"starting: waiting for the first report", "window partials in Redis", "one per window and partition",
		// The Rejected row (issue 26, papercut 9).
		"records rejected in all, kept in REJECTED", "not counted yet", "left REJECTED before they were counted", "`none`")
	// The health panel's Alerts row (issue 14, alert rules).
	add("alert states", regexp.MustCompile(`el\('span', \{ class: '(?:muted|alerts-[a-z]+)' \}, '([^':]+)`), js, 4)
	labels = append(labels, "since", "checked", "last fetched", "never fetched")
	// The health panel's Owners row (issue 27): its words for a group, a
	// partition nobody holds and a deployment without leases.
	add("owner states", regexp.MustCompile(`el\('span', \{ class: '(?:muted|owners-[a-z]+)' \}, '([^':]+)`), js[strings.Index(js, "function renderOwners"):], 4)
	labels = append(labels, "members", "nobody", "leases unavailable")
	// The time zone selector (docs/spec.md §5.2): its label, its URL
	// parameter and zone.js's words.
	add("selector", regexp.MustCompile(`<label class="tz" for="tz">([^<]+)</label>`), html, 1)
	zone := read("pkg/dashboard/web/zone.js")
	add("zone browser", regexp.MustCompile(`' \((this browser)\)'`), zone, 1)
	add("zone refused", regexp.MustCompile(`' (refused, showing UTC): '`), zone, 1)
	labels = append(labels, "?tz=", "/api/zone", "(-04:00)")
	// Local days (docs/spec.md §5.2): the card's columns and days.js's words.
	add("local days columns", regexp.MustCompile(`<th class="d-[a-z]+[^"]*">([^<]+)</th>`), html, 6)
	days := read("pkg/dashboard/web/days.js")
	add("local days words", regexp.MustCompile(`' ?(clocks (?:forward|back)|days of|refused|Older days)`), days, 5)
	labels = append(labels, "/api/days", "from 00:00", "23 clocks forward", "25 clocks back")
	add("buttons", regexp.MustCompile(`<button id="\w+" type="button"[^>]*>([^<]+)</button>`), html, 3)
	// The explanation drawer (issue 26): its headings, its sum and its
	// words for a missing verdict (explain.js).
	add("drawer headings", regexp.MustCompile(`<h3>([^<(]+?) ?[<(]`), html, 2)
	labels = append(labels, "holds its number", "counted =", "on time", "Close", "no verdict here")
	if ex := read("pkg/dashboard/web/explain.js"); !strings.Contains(ex, "no verdict here") {
		t.Error("explain.js no longer says \"no verdict here\"; update the labels above")
	}
	for _, l := range labels {
		if !strings.Contains(doc, l) {
			t.Errorf("the page shows %q; docs/reading-the-dashboard.md does not explain it", l)
		}
	}
	// Each item of the health panel says what the operator does.
	for _, row := range strings.Split(doc, "\n") {
		if strings.HasPrefix(row, "| ") && strings.Count(row, "|") == 4 && !strings.HasPrefix(row, "| shown") &&
			!strings.HasPrefix(row, "| item") && !strings.HasPrefix(row, "| bar") {
			if cells := strings.Split(row, "|"); strings.TrimSpace(cells[3]) == "" {
				t.Errorf("no action in row %q", row)
			}
		}
	}
}

// TestReadmeAnswersANewUser (issue 26): the README says what the
// embedded default is where it first names it, where urls.json goes, that
// the demo starts with past hours filled in, and how long make test takes.
func TestReadmeAnswersANewUser(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	i := strings.Index(readme, "embedded default")
	if i < 0 || !strings.Contains(readme[i:min(len(readme), i+700)], "miniredis") {
		t.Errorf("the README names the embedded default without saying, within the next paragraph, what it is (in-process nats-server and miniredis)")
	}
	for _, want := range []string{"`urls.json` in its data directory (`--data-dir`; without it a new\ntemporary directory",
		"starts with\nthe past four hours filled in", "about 20 minutes on 2 cores"} {
		if !strings.Contains(readme, want) {
			t.Errorf("the README does not say %q", want)
		}
	}
}
