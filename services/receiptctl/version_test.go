package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestVersion (issue 26): receiptctl --version prints the build (module
// version, VCS revision) and exits 0; it was an unknown command.
func TestVersion(t *testing.T) {
	code, out, errs := runCLI(t, "--version")
	if code != 0 || !strings.HasPrefix(out, "receiptctl ") || !strings.Contains(out, "go1.") {
		t.Errorf("--version: exit %d, %q (%s), want 0 and the build", code, out, errs)
	}
}

// TestWatchGivenAnHTTPURL (issue 26): watch given the dashboard's HTTP
// URL says at once that it looks like one and to pass the NATS URL (a
// usage error). It failed after 2 s with "i/o timeout" and no hint.
func TestWatchGivenAnHTTPURL(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	code, _, errs := runCLI(t, "watch", "--once", "--nats-url", srv.URL)
	if code != 2 || !strings.Contains(errs, "looks like an HTTP URL") || !strings.Contains(errs, "pass the NATS URL") {
		t.Errorf("exit %d, stderr %q; want 2 and a hint to pass the NATS URL", code, errs)
	}
}
