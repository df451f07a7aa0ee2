package dashboard

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/testenv"
)

// TestZoneAPI: GET /api/zone gives Berlin's 2026 periods (CET, CEST, CET)
// with their offsets; a half-hour zone, an unknown one and a bad range are
// a 400 whose error names the zone or the parameter.
func TestZoneAPI(t *testing.T) {
	_, url := testenv.NATS(t)
	f := start(t, url, Config{Generation: "1", StaleAfter: time.Minute, Recent: 5})
	var z ZoneView
	f.getJSON("/api/zone?tz=Europe/Berlin&from=2026-01-01T00:00:00Z&to=2027-01-01T00:00:00Z", &z)
	if z.Zone != "Europe/Berlin" || len(z.Periods) != 3 || z.Periods[1].Abbrev != "CEST" || z.Periods[1].Offset != 7200 ||
		!z.Periods[1].Start.Equal(time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC)) || !z.Periods[2].Start.Equal(time.Date(2026, 10, 25, 1, 0, 0, 0, time.UTC)) {
		t.Fatalf("Berlin: %+v", z)
	}
	for q, want := range map[string]string{
		"?tz=Asia/Kolkata":    "Asia/Kolkata",
		"?tz=Asia/Kathmandu":  "Asia/Kathmandu",
		"?tz=Mars/Olympus":    "Mars/Olympus",
		"?tz=UTC&from=monday": "from",
		"?tz=UTC&from=2026-01-01T00:00:00Z&to=2060-01-01T00:00:00Z": "20 years",
	} {
		resp, err := http.Get(f.base + "/api/zone" + q)
		if err != nil {
			t.Fatal(err)
		}
		var body ZoneView
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || err != nil || !strings.Contains(body.Error, want) {
			t.Errorf("%s: %s %+v %v, want a 400 naming %s", q, resp.Status, body, err, want)
		}
	}
}
