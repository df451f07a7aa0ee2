package dashboard

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/testenv"
)

// TestExplainAPIWithoutRedis: a dashboard started without the deployment's
// Redis says so at GET /api/explain (200, so the page can ask before any
// click without an error in its console), answers a window with 503 naming
// --redis-url, and a bad id with 400.
func TestExplainAPIWithoutRedis(t *testing.T) {
	_, url := testenv.NATS(t)
	f := start(t, url, Config{Generation: "1", StaleAfter: time.Minute, Recent: 5})
	var info struct {
		Available bool   `json:"available"`
		Reason    string `json:"reason"`
	}
	f.getJSON("/api/explain", &info)
	if info.Available || !strings.Contains(info.Reason, "--redis-url") {
		t.Fatalf("GET /api/explain = %+v, want unavailable naming --redis-url", info)
	}
	for path, want := range map[string]int{
		"/api/explain/2026-12-02T10": http.StatusServiceUnavailable,
		"/api/explain/yesterday":     http.StatusBadRequest,
	} {
		resp, err := http.Get(f.base + path)
		if err != nil {
			t.Fatal(err)
		}
		var body map[string]string
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != want || err != nil || body["error"] == "" {
			t.Errorf("%s: %s %v %v, want %d with an error", path, resp.Status, body, err, want)
		}
	}
}
