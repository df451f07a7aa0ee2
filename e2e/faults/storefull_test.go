package faults

// Full broker store (issue 23, deliverable 3): a real nats-server whose
// max_file_store fills mid-ingest. receiptctl ingest must exit 1 naming
// the first unconfirmed record; the services must wait (not ready, the
// broker_store_full gauge at 1, no exit, nothing acked) and go on by
// themselves once the limit is raised by a config reload; the input
// published again must then give the clean run's windows.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/pkg/testenv"
)

// storeFullLimit is the broker's max_file_store in TestBrokerStoreFull:
// about half of what RAW alone takes for brokerSet, so the store fills
// mid-ingest whatever the services wrote meanwhile.
const storeFullLimit = 6 << 20

func TestBrokerStoreFull(t *testing.T) {
	brokerSet.cleanRun(t)
	d := deployWith(t, setup{broker: true, maxFileStore: storeFullLimit})
	ctx, cancel := context.WithTimeout(context.Background(), brokerTimeout)
	defer cancel()
	admin := d.admin(ctx)
	path := brokerSet.fixture(t)

	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, filepath.Join(binaries(t), "receiptctl"), "ingest", "--events", path,
		"--nats-url", d.natsURL, "--partitions", "8", "--end-of-stream", "--retry-for", "8s")
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("ingest into a full store: %v, want exit status 1\n%s", err, tailOf(out.Bytes(), 3000))
	}
	m := unconfirmedRe.FindSubmatch(out.Bytes())
	if m == nil {
		t.Fatalf("ingest exited 1 without naming the first unconfirmed record:\n%s", tailOf(out.Bytes(), 3000))
	}
	line, _ := strconv.Atoi(string(m[1]))
	t.Logf("ingest exited 1: first unconfirmed record at line %d, event_id %q", line, m[2])
	if !bytes.Contains(out.Bytes(), []byte("the broker's store is full")) {
		t.Errorf("ingest did not say the broker's store is full:\n%s", tailOf(out.Bytes(), 3000))
	}
	requireRAWBefore(t, ctx, admin, path, line, string(m[2]))

	// The services wait for room. The validator has RAW left to write to
	// VALID when the store fills (ingest sends a batch every few
	// milliseconds and runs ahead of it); the windowers and the publisher
	// wait when they have something to write.
	v := d.procs[0]
	testenv.CheckFor(t, time.Minute, 100*time.Millisecond, func() error {
		code, body, err := getProbe(ctx, v.http, "/readyz")
		if err != nil {
			return err
		}
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "broker's store is full") {
			return fmt.Errorf("validator /readyz: %d %s", code, body)
		}
		if g, err := gauge(ctx, v.http, "receiptflow_validator_broker_store_full"); err != nil || g != 1 {
			return fmt.Errorf("receiptflow_validator_broker_store_full %v (%v)", g, err)
		}
		return nil
	})
	for _, p := range d.procs {
		_, body, _ := getProbe(ctx, p.http, "/readyz")
		t.Logf("%s while the store is full: %s", p.name, strings.TrimSpace(body))
	}
	requireNoRestarts(t, d)

	// The operator raises the limit; nats-server reloads it on SIGHUP.
	if err := d.nats.SetMaxFileStore(1 << 30); err != nil {
		t.Fatal(err)
	}
	raised := time.Now()
	testenv.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		for _, p := range d.procs {
			if g, err := gauge(ctx, p.http, "receiptflow_"+p.name+"_broker_store_full"); err != nil || g != 0 {
				return fmt.Errorf("%s still waits for room", p.name)
			}
		}
		return nil
	})
	t.Logf("no service waits for room %s after the limit was raised", time.Since(raised).Round(10*time.Millisecond))
	// ... and publishes the file again, whole: what RAW has is dropped as
	// a duplicate.
	d.startIngest(ctx, path).wait()
	o := d.outcome(ctx, admin, brokerSet)
	o.require(t)
	for _, p := range d.procs {
		testenv.CheckFor(t, 30*time.Second, 100*time.Millisecond, func() error {
			code, body, err := getProbe(ctx, p.http, "/readyz")
			if err != nil || code != http.StatusOK {
				return fmt.Errorf("%s /readyz: %d %s %v", p.name, code, body, err)
			}
			name := "receiptflow_" + p.name + "_broker_store_full"
			if g, err := gauge(ctx, p.http, name); err != nil || g != 0 {
				return fmt.Errorf("%s %v (%v)", name, g, err)
			}
			return nil
		})
	}
	requireNoRestarts(t, d)
}

// requireNoRestarts fails t if a service process exited.
func requireNoRestarts(t *testing.T, d *deployment) {
	t.Helper()
	for _, p := range d.procs {
		if n := p.Restarts(); n > 0 {
			t.Fatalf("%s exited %d times; its last errors:\n%s", p.name, n, p.lastErrors(5))
		}
	}
}

// getProbe GETs path from a service's HTTP address.
func getProbe(ctx context.Context, addr, path string) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// gauge reads an unlabelled gauge from a service's /metrics.
func gauge(ctx context.Context, addr, name string) (float64, error) {
	_, body, err := getProbe(ctx, addr, "/metrics")
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("no metric %s", name)
}
