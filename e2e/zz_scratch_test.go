package e2e

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/pipeline"
	"github.com/receiptflow/receiptflow/pkg/stream"
)

func TestZZScratch(t *testing.T) {
	opts, err := server.ProcessConfigFile("../deploy/nats/nats.conf")
	if err != nil {
		t.Fatal(err)
	}
	opts.Host, opts.Port, opts.HTTPPort = "127.0.0.1", -1, 0
	opts.StoreDir = t.TempDir()
	opts.Cluster = server.ClusterOpts{}
	opts.NoSigs = true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	s.ConfigureLogger()
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("not ready")
	}
	defer s.Shutdown()
	url := s.ClientURL()
	pw := func(u string) string { b, _ := os.ReadFile("../deploy/secrets/dev/nats-" + u + ".password"); return string(b) }
	conn := func(u string) (*pipeline.Conn, chan error) {
		errs := make(chan error, 10)
		sec := pipeline.NATSSecurity{User: u, Password: pw(u)}
		o, err := sec.Options()
		if err != nil {
			t.Fatal(err)
		}
		o = append(o, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
		c, err := pipeline.ConnectNATS(url, u, o...)
		if err != nil {
			t.Fatal(err)
		}
		return c, errs
	}
	ctx := context.Background()
	admin, _ := conn("admin")
	if err := stream.Ensure(ctx, admin.JS, stream.For(""), stream.Config{Partitions: 8}); err != nil {
		t.Fatal(err)
	}
	_, err = nats.Connect(url)
	t.Logf("anon: %v", err)
	dash, derrs := conn("dashboard")
	kv, err := dash.JS.KeyValue(ctx, "receipts-1")
	t.Logf("dash kv: %v", err)
	_, err = kv.Put(ctx, "window.x", []byte("1"))
	t.Logf("dash put: %v", err)
	select {
	case e := <-derrs:
		t.Logf("async: %v", e)
	case <-time.After(time.Second):
	}
	// push consumer escape
	_, err = dash.JS.CreateOrUpdateConsumer(ctx, "KV_receipts-1", jetstream.ConsumerConfig{Name: "evil", FilterSubject: "$KV.receipts-1.>"})
	t.Logf("dash pull create: %v", err)
	pub, _ := conn("publisher")
	pkv, err := pub.JS.KeyValue(ctx, "receipts-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pkv.Put(ctx, "window.y", []byte(`{"a":1}`)); err != nil {
		t.Fatal(err)
	}
	// legacy push consumer with deliver subject rf.raw.0 via raw API
	req := `{"stream_name":"KV_receipts-1","config":{"name":"evil2","deliver_subject":"rf.raw.0","filter_subject":"$KV.receipts-1.>","ack_policy":"none","deliver_policy":"all"}}`
	resp, err := dash.NC.Request("$JS.API.CONSUMER.CREATE.KV_receipts-1.evil2.$KV.receipts-1.>", []byte(req), 2*time.Second)
	if err != nil {
		t.Logf("push create err %v", err)
	} else {
		t.Logf("push create resp %s", resp.Data)
	}
	time.Sleep(3 * time.Second)
	ci, err := admin.JS.Consumer(ctx, "KV_receipts-1", "evil2")
	if err == nil {
		t.Logf("evil2 delivered %+v pending %d", ci.CachedInfo().Delivered, ci.CachedInfo().NumPending)
	}
	sub, _ := admin.NC.SubscribeSync("rf.raw.0")
	_ = sub
	time.Sleep(2 * time.Second)
	ci, _ = admin.JS.Consumer(ctx, "KV_receipts-1", "evil2")
	t.Logf("evil2 after interest delivered %+v pending %d", ci.CachedInfo().Delivered, ci.CachedInfo().NumPending)
	raw, _ := admin.JS.Stream(ctx, "RAW")
	info, _ := raw.Info(ctx)
	t.Logf("RAW msgs after push trick: %d", info.State.Msgs)
	w, err := kv.Watch(ctx, "window.*")
	if err != nil {
		t.Fatal(err)
	}
	for e := range w.Updates() {
		if e == nil {
			break
		}
		t.Logf("watch %s %s", e.Key(), e.Value())
	}
	w.Stop()
	_ = strings.Contains
}
