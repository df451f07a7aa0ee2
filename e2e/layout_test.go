package e2e

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// The floor plan of docs/architecture.md, held against the code's imports.

const modulePath = "github.com/receiptflow/receiptflow"

// servicePackages are the packages of the pipeline's services: each reads
// what the one before it wrote only through pkg/wire.
var servicePackages = []string{"ingest", "validator", "windower", "publisher", "dashboard"}

// repoRoot is the repository root (this file lives in e2e/).
func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller information")
	}
	return filepath.Dir(filepath.Dir(file))
}

// deps lists the packages pattern depends on (go list -deps), run in dir
// of the repository.
func deps(t *testing.T, dir string, patterns ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-deps"}, patterns...)...)
	cmd.Dir = filepath.Join(repoRoot(t), dir)
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go list -deps %v: %v\n%s", patterns, err, stderr)
	}
	return strings.Fields(string(out))
}

// serviceImports returns the service packages among deps, other than own.
func serviceImports(deps []string, own string) []string {
	var bad []string
	for _, d := range deps {
		for _, svc := range servicePackages {
			if svc != own && d == modulePath+"/pkg/"+svc {
				bad = append(bad, d)
			}
		}
	}
	return bad
}

// TestServicesImportOnlyWire: a service package imports pkg/wire and shared
// helpers, never another service's package (directly or through another
// package).
func TestServicesImportOnlyWire(t *testing.T) {
	for _, svc := range servicePackages {
		d := deps(t, "pkg", "./"+svc)
		if !slices.Contains(d, modulePath+"/pkg/wire") {
			t.Errorf("pkg/%s does not import pkg/wire", svc)
		}
		if bad := serviceImports(d, svc); len(bad) > 0 {
			t.Errorf("pkg/%s depends on other services: %v", svc, bad)
		}
	}
}

// TestServiceImportCheckCatches: the check above sees a dependency on
// another service (the in-process supervisor depends on all of them).
func TestServiceImportCheckCatches(t *testing.T) {
	if bad := serviceImports(deps(t, "pkg", "./pipeline"), "ingest"); len(bad) < 3 {
		t.Fatalf("pkg/pipeline seen depending on %v; want every other service", bad)
	}
}

// embeddedServers are the packages of in-process servers: tests and
// receiptctl's one-process modes (run, demo, rebuild) link them; a
// deployed service binary must not.
var embeddedServers = []string{"github.com/nats-io/nats-server/", "github.com/alicebob/miniredis/", modulePath + "/pkg/embedded", modulePath + "/pkg/pipeline"}

func linked(deps []string) []string {
	var bad []string
	for _, d := range deps {
		for _, p := range embeddedServers {
			if strings.HasPrefix(d, p) || d == strings.TrimSuffix(p, "/") {
				bad = append(bad, d)
				break
			}
		}
	}
	return bad
}

// TestServiceBinariesLinkNoServers: the deployed binaries (validator,
// windower, publisher, dashboard) link neither nats-server nor miniredis,
// nor the in-process supervisor. receiptctl is left out on purpose: its
// run, demo and rebuild commands start the embedded servers.
func TestServiceBinariesLinkNoServers(t *testing.T) {
	for _, bin := range []string{"validator", "windower", "publisher", "dashboard"} {
		if bad := linked(deps(t, "services", "./"+bin)); len(bad) > 0 {
			t.Errorf("services/%s links %d embedded-server packages, e.g. %s", bin, len(bad), bad[0])
		}
	}
	// The check sees them where they are linked.
	if bad := linked(deps(t, "services", "./receiptctl")); len(bad) == 0 {
		t.Error("receiptctl seen linking no embedded server; the check cannot see them")
	}
}

// TestEveryPackageHasTests: every package of every module has tests.
func TestEveryPackageHasTests(t *testing.T) {
	for _, mod := range []string{"pkg", "services", "schemas", "e2e"} {
		cmd := exec.Command("go", "list", "-f", "{{if and (not .TestGoFiles) (not .XTestGoFiles)}}{{.ImportPath}}{{end}}", "./...")
		cmd.Dir = filepath.Join(repoRoot(t), mod)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list in %s: %v", mod, err)
		}
		for _, p := range strings.Fields(string(out)) {
			t.Errorf("%s has no tests", p)
		}
	}
}

// TestGitIgnoresGeneratedOutput: what the Makefile's targets write into
// the checkout (binaries, run and hand-off output, bench results, test
// artifacts) is ignored by git, so that a `make handoff` or `make bench`
// leaves `git status` clean. Before, handoff/ and bench-results.json were
// not ignored.
func TestGitIgnoresGeneratedOutput(t *testing.T) {
	for _, p := range []string{"bin/receiptctl", "out/windows.json", "handoff/README.md", "bench-results.json", "e2e/artifacts/x.log", "cpu.prof"} {
		cmd := exec.Command("git", "check-ignore", "-q", "--no-index", p)
		cmd.Dir = repoRoot(t)
		if err := cmd.Run(); err != nil {
			t.Errorf("git check-ignore %s: %v (want it ignored)", p, err)
		}
	}
}
