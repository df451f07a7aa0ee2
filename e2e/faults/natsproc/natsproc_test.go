package natsproc

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/testenv"
)

var bin Binary

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "natsproc-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin.Dir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// publish stores n messages on subject and returns the last sequence.
func publish(t *testing.T, js jetstream.JetStream, subject string, n int) uint64 {
	t.Helper()
	var last uint64
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ack, err := js.Publish(ctx, subject, []byte(fmt.Sprint(i)))
		cancel()
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		last = ack.Sequence
	}
	return last
}

// lastSeq asks for the stream's last sequence until the client has
// reconnected and the server answers.
func lastSeq(t *testing.T, js jetstream.JetStream, name string, want uint64) {
	t.Helper()
	testenv.CheckFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		st, err := js.Stream(ctx, name)
		if err != nil {
			return err
		}
		if got := st.CachedInfo().State.LastSeq; got != want {
			return fmt.Errorf("last sequence %d, want %d", got, want)
		}
		return nil
	})
}

func connect(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func TestSIGKILLKeepsAcknowledgedMessages(t *testing.T) {
	s := Start(t, bin.Path(t), Options{})
	js := connect(t, s.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	var want uint64
	for round := 0; round < 3; round++ {
		want = publish(t, js, "s", 200)
		s.Kill()
		if s.Running() {
			t.Fatal("running after Kill")
		}
		s.Kill() // safe twice
		s.Restart(t)
		lastSeq(t, js, "S", want)
	}
	if want != 600 {
		t.Fatalf("last sequence %d, want 600", want)
	}
}

func TestClusterNodeRestartsOnItsStore(t *testing.T) {
	servers, urls := StartCluster(t, bin.Path(t), 3)
	js := connect(t, urls)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	testenv.CheckFor(t, 30*time.Second, 100*time.Millisecond, func() error {
		st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s"}, Storage: jetstream.FileStorage, Replicas: 3})
		if err != nil {
			return err
		}
		// Only the leader of a replicated stream listens on its subjects
		// (nats-server subscribes in setLeader): a publish made before the
		// group has elected one gets no responders once the client's
		// retries are spent, as it did on a busy host.
		info, err := st.Info(ctx)
		if err != nil {
			return err
		}
		if info.Cluster == nil || info.Cluster.Leader == "" {
			return fmt.Errorf("stream S has no leader yet")
		}
		return nil
	})
	want := publish(t, js, "s", 100)
	servers[0].Kill()
	lastSeq(t, js, "S", want) // two of three nodes keep the stream available
	servers[0].Restart(t)
	lastSeq(t, js, "S", want)
}

func TestStopPauseAndRestart(t *testing.T) {
	s := Start(t, bin.Path(t), Options{})
	js := connect(t, s.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	want := publish(t, js, "s", 50)
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	if !s.Running() {
		t.Fatal("a paused server is not running")
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	lastSeq(t, js, "S", want)
	if err := s.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-s.Exited()
	if err := s.Signal(syscall.SIGTERM); err == nil {
		t.Fatal("Signal to an exited server: no error")
	}
	s.Restart(t)
	lastSeq(t, js, "S", want)
}
