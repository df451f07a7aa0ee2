package e2e

// The metric names the docs use (issue 26, metric names): every metric a
// doc names is one the services export (deployKnownMetrics, the list the
// Grafana and alert rule tests check against), and no doc, dashboard or
// alert rule names a former name CHANGELOG.md lists as renamed, while the
// code still exports each former name beside its new one for the release
// the changelog promises.

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// metricServices are the <svc> of receiptflow_<svc>_* names.
var metricServices = []string{"validator", "windower", "publisher", "dashboard"}

// docMetricNames returns the metric names text uses, each as written with
// the receiptflow_ prefix ("receiptflow_<svc>_ready"): whole names
// anywhere, and in backticks the short forms of the metrics tables
// (`windower_script_seconds`, `<svc>_redis_up`, and `_kv_conflicts_total`
// or `…_consumer_redelivered_messages` after a name of the same service).
func docMetricNames(text string) []string {
	whole := regexp.MustCompile(`receiptflow_(?:<svc>|<service>|[a-z]+)_[a-z][a-z_]*`)
	short := regexp.MustCompile("^`(?:(" + strings.Join(metricServices, "|") + `|<svc>|<service>)_|(…?)_)([a-z][a-z_]*)`)
	svcOf := regexp.MustCompile(`^receiptflow_(<svc>|<service>|[a-z]+)_`)
	seen := map[string]bool{}
	var out []string
	add := func(name string) {
		name = strings.ReplaceAll(name, "<service>", "<svc>")
		if !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	last := "" // the service of the name before, for a short form that continues it
	for _, tok := range regexp.MustCompile("`[^`\n]*`|receiptflow_[^\\s`]*").FindAllString(text, -1) {
		if m := whole.FindString(tok); m != "" {
			add(m)
			last = svcOf.FindStringSubmatch(m)[1]
			continue
		}
		m := short.FindStringSubmatch(tok)
		switch {
		case m == nil:
		case m[1] != "":
			add("receiptflow_" + m[1] + "_" + m[3])
			last = m[1]
		case last != "":
			add("receiptflow_" + last + "_" + m[3])
		}
	}
	return out
}

// metricExported says whether name (receiptflow_<svc>_x: for some service)
// is in known, a histogram's _bucket, _sum and _count included.
func metricExported(known map[string]bool, name string) bool {
	for _, c := range metricCandidates(name) {
		if known[c] {
			return true
		}
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(c, suf); ok && known[base] {
				return true
			}
		}
	}
	return false
}

// metricCandidates is name, or with <svc> the name of each service.
func metricCandidates(name string) []string {
	rest, ok := strings.CutPrefix(name, "receiptflow_<svc>_")
	if !ok {
		return []string{name}
	}
	var out []string
	for _, svc := range metricServices {
		out = append(out, "receiptflow_"+svc+"_"+rest)
	}
	return out
}

// changelogRenames returns the renames of CHANGELOG.md's Unreleased
// section, new name by former name, label sets dropped.
func changelogRenames(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, unreleased, ok := strings.Cut(string(b), "\n## Unreleased\n")
	if !ok {
		t.Fatal("CHANGELOG.md has no Unreleased section")
	}
	unreleased, _, _ = strings.Cut(unreleased, "\n## ")
	row := regexp.MustCompile("(?m)^\\| `(receiptflow_[a-z_]+)[^`]*` \\| `(receiptflow_[a-z_]+)[^`]*` \\|")
	out := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(unreleased, -1) {
		out[m[1]] = m[2]
	}
	return out
}

func TestDocsNameOnlyExportedMetrics(t *testing.T) {
	known := deployKnownMetrics(t)
	renames := changelogRenames(t)
	if len(renames) == 0 {
		t.Fatal("CHANGELOG.md's Unreleased section lists no rename (its table is `former` | `new`)")
	}
	for old, now := range renames {
		if !known[now] {
			t.Errorf("CHANGELOG.md renames %s to %s, which no service exports", old, now)
		}
		if !known[old] {
			t.Errorf("CHANGELOG.md says %s is still exported, deprecated, until the next release; no service exports it", old)
		}
	}
	docs, err := filepath.Glob(filepath.Join(repoRoot(t), "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	docs = append(docs, filepath.Join(repoRoot(t), "README.md"))
	total := 0
	for _, path := range docs {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(repoRoot(t), path)
		for _, name := range docMetricNames(string(b)) {
			total++
			if !metricExported(known, name) {
				t.Errorf("%s names %s, which no service exports", rel, name)
			}
			for _, c := range metricCandidates(name) {
				if now, ok := renames[c]; ok {
					t.Errorf("%s names %s, renamed to %s (CHANGELOG.md)", rel, name, now)
					break
				}
			}
		}
	}
	// The shipped dashboard and alert rules read the new names only.
	shipped, err := filepath.Glob(filepath.Join(repoRoot(t), "deploy", "grafana", "dashboards", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []string{"*.yml", "*.yaml"} {
		rules, _ := filepath.Glob(filepath.Join(repoRoot(t), "deploy", "prometheus", g))
		shipped = append(shipped, rules...)
	}
	if len(shipped) < 3 {
		t.Fatalf("found %v, want the Grafana dashboard, alerts.yml and alerts_test.yml", shipped)
	}
	for _, path := range shipped {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(repoRoot(t), path)
		for old, now := range renames {
			if regexp.MustCompile(`\b` + old + `(?:_bucket|_sum|_count)?\b`).Match(b) {
				t.Errorf("%s reads %s, renamed to %s (CHANGELOG.md)", rel, old, now)
			}
		}
	}
	if total < 40 {
		t.Errorf("found %d metric names in the docs, want at least 40: the reader of docMetricNames is broken", total)
	}
}

// TestDocMetricNamesReadsTheShortForms: the reader finds whole names, the
// tables' short forms and their continuations, and nothing else.
func TestDocMetricNamesReadsTheShortForms(t *testing.T) {
	text := "Source: `receiptflow_<service>_consumer_pending_messages` and\n`…_consumer_redelivered_messages`; " +
		"| `publisher_kv_writes_total`, `_kv_stale_skips_total` | `<svc>_batch_size_messages` (histograms) | " +
		"`windower_events_total{decision=\"late\"}` and receiptflow_dashboard_alert_polls_total; not `_INBOX.>`, `nats_url` or `receiptflow_<svc>_*`."
	want := []string{"receiptflow_<svc>_consumer_pending_messages", "receiptflow_<svc>_consumer_redelivered_messages",
		"receiptflow_publisher_kv_writes_total", "receiptflow_publisher_kv_stale_skips_total", "receiptflow_<svc>_batch_size_messages",
		"receiptflow_windower_events_total", "receiptflow_dashboard_alert_polls_total"}
	if got := docMetricNames(text); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("docMetricNames\n got %v\nwant %v", got, want)
	}
}
