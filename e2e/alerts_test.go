package e2e

// The alerting rules (issue 14, "Alert rules"): deploy/prometheus/alerts.yml
// passes its promtool unit tests (deploy/prometheus/alerts_test.yml), and
// those tests are not vacuous: each alert broken in a copy of the file
// makes them fail. Every alert has a firing and a silent test case, the
// labels and annotations the runbook needs, a runbook section that exists
// in docs/alerts.md, and reads only metrics the services export.

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"

	"github.com/receiptflow/receiptflow/pkg/pipeline"
	"github.com/receiptflow/receiptflow/pkg/testenv"
)

// promtoolVersion is the promtool .ci/run installs.
const promtoolVersion = "v0.316.0"

// alertsPromtool returns the path of promtool: on PATH, else in the tool
// cache .ci/run installs it into. Without one the test fails under
// CI=true and is skipped loudly otherwise.
func alertsPromtool(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("promtool"); err == nil {
		return p
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		if home, err := os.UserHomeDir(); err == nil {
			cache = filepath.Join(home, ".cache")
		}
	}
	if cache != "" {
		p := filepath.Join(cache, "receiptflow", "bin", "promtool")
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p
		}
	}
	msg := "promtool not found on PATH nor in $XDG_CACHE_HOME/receiptflow/bin (install it with `GOWORK=off go install github.com/prometheus/prometheus/cmd/promtool@" +
		promtoolVersion + "`, as .ci/run does); the alerting rules cannot be tested"
	if os.Getenv("CI") == "true" {
		t.Fatalf("FAIL under CI=true: %s", msg)
	}
	fmt.Fprintf(os.Stderr, "!!! %s: SKIPPING THE ALERT RULE TESTS: %s !!!\n", t.Name(), msg)
	t.Skipf("!!! the alert rule tests were NOT run: %s !!!", msg)
	return ""
}

// alertsRun runs promtool with args in dir and returns its output and
// whether it exited 0.
func alertsRun(t *testing.T, promtool, dir string, args ...string) (string, bool) {
	t.Helper()
	cmd := exec.Command(promtool, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if _, exited := err.(*exec.ExitError); err != nil && !exited {
		t.Fatalf("run promtool %v: %v", args, err)
	}
	return string(out), err == nil
}

func alertsDir(t *testing.T) string {
	return filepath.Join(repoRoot(t), "deploy", "prometheus")
}

func TestAlertRulesPassPromtool(t *testing.T) {
	promtool := alertsPromtool(t)
	dir := alertsDir(t)
	if out, ok := alertsRun(t, promtool, dir, "check", "rules", "alerts.yml"); !ok {
		t.Errorf("promtool check rules alerts.yml failed:\n%s", out)
	}
	// prometheus.yml loads alerts.yml (rule_files); check config checks it
	// too, offline.
	if out, ok := alertsRun(t, promtool, dir, "check", "config", "prometheus.yml"); !ok {
		t.Errorf("promtool check config prometheus.yml failed:\n%s", out)
	} else if !strings.Contains(out, "1 rule files found") {
		t.Errorf("promtool check config found no rule file:\n%s", out)
	}
	if out, ok := alertsRun(t, promtool, dir, "test", "rules", "alerts_test.yml"); !ok {
		t.Errorf("promtool test rules alerts_test.yml failed:\n%s", out)
	}
}

// TestAlertRuleTestsCatchABrokenRule: each alert broken in a copy of
// alerts.yml (a threshold, a for:, a guard) fails the unit tests, and the
// failure names that alert: the tests hold each rule to its threshold.
func TestAlertRuleTestsCatchABrokenRule(t *testing.T) {
	promtool := alertsPromtool(t)
	dir := alertsDir(t)
	rules, err := os.ReadFile(filepath.Join(dir, "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(filepath.Join(dir, "alerts_test.yml"))
	if err != nil {
		t.Fatal(err)
	}
	breaks := []struct {
		alert, old, new string
	}{
		// Fires later than it should.
		{"ReceiptflowSourceStale", "expr: receiptflow_publisher_source_stale == 1\n        for: 2m", "expr: receiptflow_publisher_source_stale == 1\n        for: 10m"},
		// A flat backlog counts as growing.
		{"ReceiptflowBacklogGrowing", "deriv(receiptflow_validator_consumer_pending_messages[10m]) > 0", "deriv(receiptflow_validator_consumer_pending_messages[10m]) >= 0"},
		// A 2% share of corrections counts as a spike.
		{"ReceiptflowCorrectionSpike", ") > 0.10", ") > 0.01"},
		// A trickle of rejections counts as a spike.
		{"ReceiptflowRejectRateSpike", `increase(receiptflow_validator_messages_out_total{outcome=~"rejected_.+"}[10m])) > 10`, `increase(receiptflow_validator_messages_out_total{outcome=~"rejected_.+"}[10m])) > 1`},
		// A silent source no longer excuses a still watermark.
		{"ReceiptflowWatermarkStuck", "unless on ()\n          max(receiptflow_publisher_source_stale) == 1", "unless on ()\n          max(receiptflow_publisher_source_stale) == 2"},
		// The dashboard, not a consumer, counts.
		{"ReceiptflowConsumerNotReady", `up{job="receiptflow", service=~"validator|windower|publisher"} == 0`, `up{job="receiptflow"} == 0`},
		// Fires later than it should.
		{"ReceiptflowBrokerStoreFull", "or receiptflow_publisher_broker_store_full == 1\n        for: 1m", "or receiptflow_publisher_broker_store_full == 1\n        for: 5m"},
		// The validator's full store is missed.
		{"ReceiptflowBrokerStoreFull", "receiptflow_validator_broker_store_full == 1\n", "receiptflow_validator_broker_store_full == 2\n"},
		// Fires later than it should: a regression is told at once.
		{"ReceiptflowRedisStateRegressed", "or increase(receiptflow_windower_state_regressions_total[15m]) > 0\n        for: 0m", "or increase(receiptflow_windower_state_regressions_total[15m]) > 0\n        for: 5m"},
		// The validator's lost claims are missed.
		{"ReceiptflowRedisStateRegressed", "increase(receiptflow_validator_state_regressions_total[15m]) > 0\n", "increase(receiptflow_validator_state_regressions_total[15m]) > 1\n"},
		// A windower waiting on a full Redis goes unnoticed.
		{"ReceiptflowRedisFull", "receiptflow_windower_redis_full == 1", "receiptflow_windower_redis_full == 2"},
		// A policy set right within the minute alerts anyway.
		{"ReceiptflowRedisUnsafeEviction", "receiptflow_publisher_redis_unsafe_eviction_policy == 1\n        for: 1m", "receiptflow_publisher_redis_unsafe_eviction_policy == 1\n        for: 0s"},
		// A trickle of 503s alerts.
		{"ReceiptflowIngestUnavailable", `increase(receiptflow_ingest_requests_total{code=~"5.."}[5m])) > 10`, `increase(receiptflow_ingest_requests_total{code=~"5.."}[5m])) > 1`},
	}
	for _, b := range breaks {
		t.Run(b.alert, func(t *testing.T) {
			if strings.Count(string(rules), b.old) != 1 {
				t.Fatalf("alerts.yml does not hold %q exactly once: update this test with the rule", b.old)
			}
			tmp := t.TempDir()
			broken := strings.Replace(string(rules), b.old, b.new, 1)
			if err := os.WriteFile(filepath.Join(tmp, "alerts.yml"), []byte(broken), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(tmp, "alerts_test.yml"), tests, 0o644); err != nil {
				t.Fatal(err)
			}
			// The broken file is still a valid rule file: it is the
			// tests, not the syntax check, that must catch it.
			if out, ok := alertsRun(t, promtool, tmp, "check", "rules", "alerts.yml"); !ok {
				t.Fatalf("the broken copy is not a valid rule file:\n%s", out)
			}
			out, ok := alertsRun(t, promtool, tmp, "test", "rules", "alerts_test.yml")
			if ok {
				t.Fatalf("promtool test rules passed with %s broken (%q -> %q):\n%s", b.alert, b.old, b.new, out)
			}
			if !strings.Contains(out, "alertname: "+b.alert) {
				t.Errorf("the failure does not name %s:\n%s", b.alert, out)
			}
		})
	}
}

// alertsFile is deploy/prometheus/alerts.yml as the test reads it.
type alertsFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// alertsTestFile is deploy/prometheus/alerts_test.yml as the test reads it.
type alertsTestFile struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
		Name      string `yaml:"name"`
		AlertTest []struct {
			EvalTime  string           `yaml:"eval_time"`
			AlertName string           `yaml:"alertname"`
			ExpAlerts []map[string]any `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

// docAnchors returns the GitHub anchors of the markdown headings of doc.
func docAnchors(doc string) map[string]bool {
	anchors := map[string]bool{}
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		slug := strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(title), ""), " ", "-")
		anchors[slug] = true
	}
	return anchors
}

func TestAlertRulesAreTestedAndDocumented(t *testing.T) {
	dir := alertsDir(t)
	read := func(path string) []byte {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var rules alertsFile
	if err := yaml.Unmarshal(read(filepath.Join(dir, "alerts.yml")), &rules); err != nil {
		t.Fatalf("alerts.yml: %v", err)
	}
	var tests alertsTestFile
	if err := yaml.Unmarshal(read(filepath.Join(dir, "alerts_test.yml")), &tests); err != nil {
		t.Fatalf("alerts_test.yml: %v", err)
	}
	if len(tests.RuleFiles) != 1 || tests.RuleFiles[0] != "alerts.yml" {
		t.Errorf("alerts_test.yml tests %v, want alerts.yml", tests.RuleFiles)
	}
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, at := range tc.AlertTest {
			if len(at.ExpAlerts) > 0 {
				fires[at.AlertName] = true
			} else {
				silent[at.AlertName] = true
			}
		}
	}
	anchors := docAnchors(string(read(filepath.Join(repoRoot(t), "docs", "alerts.md"))))
	known := deployKnownMetrics(t)
	metric := regexp.MustCompile(`receiptflow_[a-z_]+`)
	want := []string{"ReceiptflowSourceStale", "ReceiptflowBacklogGrowing", "ReceiptflowCorrectionSpike",
		"ReceiptflowRejectRateSpike", "ReceiptflowWatermarkStuck", "ReceiptflowConsumerNotReady", "ReceiptflowRedisStateRegressed",
		"ReceiptflowBrokerStoreFull", "ReceiptflowRedisFull", "ReceiptflowRedisUnsafeEviction", "ReceiptflowIngestUnavailable"}
	var names []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("group %s: a rule that is not an alert (%s)", g.Name, r.Expr)
				continue
			}
			names = append(names, r.Alert)
			if !strings.HasPrefix(r.Alert, "Receiptflow") {
				t.Errorf("%s: the dashboard shows only alerts named Receiptflow*", r.Alert)
			}
			if r.For == "" {
				t.Errorf("%s has no for:", r.Alert)
			}
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("%s: severity %q, want warning or critical", r.Alert, s)
			}
			for _, a := range []string{"summary", "description", "runbook"} {
				if r.Annotations[a] == "" {
					t.Errorf("%s has no %s annotation", r.Alert, a)
				}
			}
			if !strings.Contains(r.Annotations["description"], "{{ $labels.") && !strings.Contains(r.Annotations["description"], "{{ $value") {
				t.Errorf("%s: the description names no label value", r.Alert)
			}
			doc, anchor, _ := strings.Cut(r.Annotations["runbook"], "#")
			if doc != "docs/alerts.md" || !anchors[anchor] {
				t.Errorf("%s: runbook %q is not a section of docs/alerts.md", r.Alert, r.Annotations["runbook"])
			}
			if !fires[r.Alert] || !silent[r.Alert] {
				t.Errorf("%s: a test case where it fires %v, one where it does not %v; want both in alerts_test.yml", r.Alert, fires[r.Alert], silent[r.Alert])
			}
			for _, m := range metric.FindAllString(r.Expr, -1) {
				if !known[m] {
					t.Errorf("%s reads %s, which no service exports", r.Alert, m)
				}
			}
		}
	}
	if !equalStrings(names, want) {
		t.Errorf("alerts %v, want %v", names, want)
	}
	for name := range fires {
		if !containsString(names, name) {
			t.Errorf("alerts_test.yml tests %s, which alerts.yml does not define", name)
		}
	}

	// Prometheus loads the file, and compose mounts it beside its config.
	prom := read(filepath.Join(dir, "prometheus.yml"))
	var cfg struct {
		RuleFiles []string `yaml:"rule_files"`
	}
	if err := yaml.Unmarshal(prom, &cfg); err != nil {
		t.Fatal(err)
	}
	if !equalStrings(cfg.RuleFiles, []string{"alerts.yml"}) {
		t.Errorf("prometheus.yml rule_files %v, want [alerts.yml]", cfg.RuleFiles)
	}
	if compose := read(filepath.Join(repoRoot(t), "docker-compose.yml")); !bytes.Contains(compose, []byte("./deploy/prometheus/alerts.yml:/etc/prometheus/alerts.yml:ro")) {
		t.Errorf("docker-compose.yml does not mount alerts.yml beside prometheus.yml")
	}
}

// alertsGauge returns the value of the unlabelled gauge name in reg, and
// whether there is one.
func alertsGauge(t *testing.T, reg *prometheus.Registry, name string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// TestSourceStaleGaugeFollowsTheSource: in a running pipeline the
// publisher's receiptflow_publisher_source_stale, which
// ReceiptflowSourceStale reads, is 0 while the source sends, turns 1 after
// --stale-after of silence, and 0 again when the source is back; its
// _source_last_seen_timestamp_seconds follows RAW's last message.
func TestSourceStaleGaugeFollowsTheSource(t *testing.T) {
	reg := prometheus.NewRegistry()
	rig := browserStartRig(t, 2*time.Second, func(c *pipeline.Config) { c.Registerer = reg })
	sent := time.Now()
	rig.send(sent.UTC())
	want := func(stale float64) func() error {
		return func() error {
			v, ok := alertsGauge(t, reg, "receiptflow_publisher_source_stale")
			if !ok || v != stale {
				return fmt.Errorf("receiptflow_publisher_source_stale %v (exported %v), want %v", v, ok, stale)
			}
			return nil
		}
	}
	var last float64
	testenv.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		if err := want(0)(); err != nil {
			return err
		}
		if last, _ = alertsGauge(t, reg, "receiptflow_publisher_source_last_seen_timestamp_seconds"); last == 0 {
			return errNotYet("no source message seen yet")
		}
		return nil
	})
	if at := time.UnixMilli(int64(last * 1000)); at.Before(sent.Add(-time.Second)) || at.After(time.Now()) {
		t.Errorf("source last seen %s, want about %s", at, sent)
	}
	testenv.CheckFor(t, 15*time.Second, 50*time.Millisecond, want(1))
	if d := time.Since(sent); d < 2*time.Second {
		t.Errorf("stale %s after the last message, before --stale-after (2s)", d)
	}
	rig.send(time.Now().UTC())
	testenv.CheckFor(t, 10*time.Second, 50*time.Millisecond, want(0))
	if again, _ := alertsGauge(t, reg, "receiptflow_publisher_source_last_seen_timestamp_seconds"); again <= last {
		t.Errorf("source last seen %v after a new message, was %v", again, last)
	}
}
