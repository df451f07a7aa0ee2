package testenv

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestNATSRestartKeepsStreamData(t *testing.T) {
	s, url := NATS(t)
	if !strings.HasPrefix(url, "nats://127.0.0.1:") {
		t.Fatalf("url %q", url)
	}
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:     "RAW",
		Subjects: []string{"raw.>"},
		Storage:  jetstream.FileStorage,
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		if _, err := js.Publish(ctx, "raw.p0", fmt.Appendf(nil, "event-%d", i)); err != nil {
			t.Fatal(err)
		}
	}

	s2 := RestartNATS(t, s)
	if s.Running() {
		t.Fatal("old server still running")
	}
	if got := s2.Addr().String(); !strings.HasSuffix(url, got) {
		t.Fatalf("restarted on %s, want the old URL %s", got, url)
	}

	// The client finds the new server on the same port without help.
	CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if !nc.IsConnected() {
			return fmt.Errorf("client status %v", nc.Status())
		}
		return nil
	})
	// Right after the restart the client may not have noticed yet that the
	// old server closed its connection, and a request sent on it is never
	// answered: each attempt gets its own deadline.
	var info *jetstream.StreamInfo
	CheckFor(t, 15*time.Second, 50*time.Millisecond, func() error {
		ictx, icancel := context.WithTimeout(ctx, time.Second)
		defer icancel()
		var err error
		info, err = stream.Info(ictx)
		return err
	})
	if info.State.Msgs != 3 || info.State.LastSeq != 3 {
		t.Fatalf("after restart: %d msgs, last seq %d; want 3, 3", info.State.Msgs, info.State.LastSeq)
	}
	for seq := uint64(1); seq <= 3; seq++ {
		m, err := stream.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("event-%d", seq); string(m.Data) != want {
			t.Fatalf("seq %d = %q, want %q", seq, m.Data, want)
		}
	}
	// And it keeps taking writes where it left off.
	ack, err := js.Publish(ctx, "raw.p1", []byte("event-4"))
	if err != nil || ack.Sequence != 4 {
		t.Fatalf("publish after restart: %+v, %v; want seq 4", ack, err)
	}

	// A restart of a server the test already shut down works too.
	s2.Shutdown()
	s3 := RestartNATS(t, s2)
	CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		ictx, icancel := context.WithTimeout(ctx, time.Second)
		defer icancel()
		info, err := stream.Info(ictx)
		if err != nil {
			return err
		}
		if info.State.Msgs != 4 {
			return fmt.Errorf("%d msgs, want 4", info.State.Msgs)
		}
		return nil
	})
	_ = s3
}

func TestRestartNATSUnknownServer(t *testing.T) {
	s, _ := NATS(t)
	s.Shutdown()
	s2 := RestartNATS(t, s)
	r := &recorder{TB: t}
	s2.Shutdown()
	// s was retired by the first restart; restarting it again is a mistake.
	if got := RestartNATS(r, s); got != nil || !strings.Contains(r.fatal, "not started by testenv.NATS") {
		t.Fatalf("RestartNATS(retired) = %v, fatal %q", got, r.fatal)
	}
}
