package e2e

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// dashboardFlag returns the value of flag name in a container's args,
// given as "--name value" or "--name=value" (a lone "--name" is "true").
func dashboardFlag(args []string, name string) (string, bool) {
	for i, a := range args {
		if a == name {
			if i+1 < len(args) && !strings.HasPrefix(args[i+1], "--") {
				return args[i+1], true
			}
			return "true", true
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v, true
		}
	}
	return "", false
}

func dashboardArgs(c deployK8sDoc) []string {
	var out []string
	for _, a := range asList(c["args"]) {
		s, _ := a.(string)
		out = append(out, s)
	}
	return out
}

// dashboardLoopback is auth.LoopbackListen, kept here so that the test
// reads the deployment files as the operator does.
func dashboardLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}

// readK8s reads every object of a deploy/k8s file.
func readK8s(t *testing.T, rel string) []deployK8sDoc {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(deployRoot, rel))
	if err != nil {
		t.Fatal(err)
	}
	var docs []deployK8sDoc
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var raw map[string]any
		if err := dec.Decode(&raw); err != nil {
			if err.Error() == "EOF" {
				break
			}
			t.Fatalf("%s: %v", rel, err)
		}
		if raw == nil {
			continue
		}
		d := deployK8sDoc(raw)
		if d.str("apiVersion") == "" || d.str("kind") == "" || d.str("metadata", "name") == "" {
			t.Errorf("%s: an object without apiVersion, kind or name: %v", rel, d)
		}
		docs = append(docs, d)
	}
	return docs
}

// dashboardContainers returns the containers of the file's Deployment by
// name, and the Deployment.
func dashboardContainers(t *testing.T, docs []deployK8sDoc, rel string) (map[string]deployK8sDoc, deployK8sDoc) {
	t.Helper()
	for _, d := range docs {
		if d.str("kind") != "Deployment" {
			continue
		}
		cs := map[string]deployK8sDoc{}
		for _, c := range asList(d.get("spec", "template", "spec")["containers"]) {
			cm := deployK8sDoc(asMap(c))
			cs[cm.str("name")] = cm
		}
		return cs, d
	}
	t.Fatalf("%s: no Deployment", rel)
	return nil, nil
}

// TestDeployDashboardHasAGuard (the front door, point 4): every dashboard
// manifest in deploy/k8s starts the dashboard with a guard the dashboard
// accepts: a --listen off the loopback comes with --tokens-file (a file
// in a mounted Secret) or --trusted-proxy; and the oauth2-proxy example
// puts the proxy in front of a dashboard on the pod's loopback, opening
// only the probes and /metrics without a sign-in. docs/security.md
// points to the example.
func TestDeployDashboardHasAGuard(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(deployRoot, "deploy/k8s/dashboard*.yaml"))
	if err != nil || len(files) < 2 {
		t.Fatalf("dashboard manifests %v (%v), want dashboard.yaml and dashboard-oauth2-proxy.yaml", files, err)
	}
	for _, f := range files {
		rel, _ := filepath.Rel(deployRoot, f)
		docs := readK8s(t, rel)
		cs, dep := dashboardContainers(t, docs, rel)
		dash, ok := cs["dashboard"]
		if !ok {
			t.Errorf("%s: no dashboard container", rel)
			continue
		}
		args := dashboardArgs(dash)
		listen, _ := dashboardFlag(args, "--listen")
		if listen == "" {
			listen = "127.0.0.1:8080"
		}
		tokens, withTokens := dashboardFlag(args, "--tokens-file")
		_, proxied := dashboardFlag(args, "--trusted-proxy")
		if !dashboardLoopback(listen) && !withTokens && !proxied {
			t.Errorf("%s: the dashboard listens on %s without --tokens-file or --trusted-proxy: it would refuse to start", rel, listen)
		}
		if withTokens {
			mounted := false
			for _, m := range asList(dash["volumeMounts"]) {
				mm := deployK8sDoc(asMap(m))
				if filepath.Dir(tokens) == mm.str("mountPath") {
					for _, v := range asList(dep.get("spec", "template", "spec")["volumes"]) {
						vm := deployK8sDoc(asMap(v))
						mounted = mounted || (vm.str("name") == mm.str("name") && vm.str("secret", "secretName") != "")
					}
				}
			}
			if !mounted {
				t.Errorf("%s: --tokens-file %s is not in a mounted Secret", rel, tokens)
			}
		}
	}

	const example = "deploy/k8s/dashboard-oauth2-proxy.yaml"
	docs := readK8s(t, example)
	cs, dep := dashboardContainers(t, docs, example)
	proxy, dash := cs["oauth2-proxy"], cs["dashboard"]
	if proxy == nil || dash == nil {
		t.Fatalf("%s: containers %v, want oauth2-proxy and dashboard", example, cs)
	}
	if image := proxy.str("image"); !strings.Contains(image, ":v") {
		t.Errorf("%s: the proxy's image %s is not pinned to a version", example, image)
	}
	listen, _ := dashboardFlag(dashboardArgs(dash), "--listen")
	if !dashboardLoopback(listen) {
		t.Errorf("%s: the dashboard listens on %q, want the pod's loopback (only the sidecar reaches it)", example, listen)
	}
	if len(asList(dash["ports"])) != 0 {
		t.Errorf("%s: the dashboard container declares ports; only the proxy's should be reachable", example)
	}
	pargs := dashboardArgs(proxy)
	if up, _ := dashboardFlag(pargs, "--upstream"); strings.TrimSuffix(strings.TrimPrefix(up, "http://"), "/") != listen {
		t.Errorf("%s: the proxy's upstream %q is not the dashboard's --listen %s", example, up, listen)
	}
	if skip, _ := dashboardFlag(pargs, "--skip-auth-route"); skip != "GET=^/(healthz|readyz|metrics)$" {
		t.Errorf("%s: --skip-auth-route %q, want the probes and /metrics only", example, skip)
	}
	for _, flag := range []string{"--skip-auth-regex", "--skip-jwt-bearer-tokens"} {
		if _, ok := dashboardFlag(pargs, flag); ok {
			t.Errorf("%s: the proxy passes %s: readers would reach the page without signing in", example, flag)
		}
	}
	ports := map[string]bool{}
	for _, p := range asList(proxy["ports"]) {
		pm := deployK8sDoc(asMap(p))
		ports[pm.str("name")] = true
	}
	for _, probe := range []string{"readinessProbe", "livenessProbe"} {
		if port := proxy.str(probe, "httpGet", "port"); !ports[port] {
			t.Errorf("%s: the %s goes to port %q, not the proxy's", example, probe, port)
		}
		if path := proxy.str(probe, "httpGet", "path"); path != "/readyz" && path != "/healthz" {
			t.Errorf("%s: the %s asks %q, want the dashboard's probes through the proxy", example, probe, path)
		}
	}
	for _, d := range docs {
		if d.str("kind") == "Service" {
			for _, p := range asList(d.get("spec")["ports"]) {
				if target, _ := asMap(p)["targetPort"].(string); !ports[target] {
					t.Errorf("%s: Service %s targets %q, not the proxy's port", example, d.str("metadata", "name"), target)
				}
			}
		}
	}
	if sc := asMap(dep.get("spec", "template", "spec")["securityContext"]); sc["runAsNonRoot"] != true {
		t.Errorf("%s: runAsNonRoot is not set", example)
	}
	for name, c := range cs {
		if asMap(c["securityContext"])["allowPrivilegeEscalation"] != false {
			t.Errorf("%s: container %s may escalate privileges", example, name)
		}
	}

	sec, err := os.ReadFile(filepath.Join(deployRoot, "docs/security.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(sec), "## Dashboard readers") || !strings.Contains(string(sec), example) {
		t.Errorf("docs/security.md has no \"Dashboard readers\" section pointing to %s", example)
	}
}
