package testenv

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Cluster is a routed cluster of in-process JetStream nats-servers on
// loopback, each with its own file store. Every start of a node (the first
// and each Start after a Stop) binds fresh ports chosen by the kernel and
// routes to the nodes running at that moment, so no port is ever reserved
// ahead and lost to another process (picking "free" ports first and binding
// them later made a node fail to listen now and then). A node keeps its name
// and store across restarts, which is what JetStream's peers know it by.
type Cluster struct {
	t    testing.TB
	name string

	mu      sync.Mutex
	opts    []*server.Options
	servers []*server.Server
}

// NewCluster starts n nodes named <name>-n1 … <name>-nN and waits until the
// cluster has a JetStream meta leader. configure, if not nil, may change or
// replace a node's options before its first start (e.g. with a parsed
// config file); the client and route addresses and the routes are always
// the cluster's, and so is the cluster name unless configure sets one. The
// servers are shut down by t.Cleanup.
func NewCluster(t testing.TB, name string, n int, configure func(i int, o *server.Options)) *Cluster {
	t.Helper()
	c := &Cluster{t: t, name: name, opts: make([]*server.Options, n), servers: make([]*server.Server, n)}
	for i := range c.opts {
		o := &server.Options{
			ServerName: fmt.Sprintf("%s-n%d", name, i+1),
			JetStream:  true,
			StoreDir:   t.TempDir(),
			NoSigs:     true, NoLog: true,
		}
		if configure != nil {
			configure(i, o)
		}
		c.opts[i] = o
	}
	t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, s := range c.servers {
			if s != nil {
				s.Shutdown()
				s.WaitForShutdown()
			}
		}
	})
	for i := range c.opts {
		c.Start(i)
	}
	CheckFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		for i := range c.opts {
			if s := c.Server(i); s != nil && s.JetStreamIsLeader() {
				return nil
			}
		}
		return errors.New("no JetStream meta leader")
	})
	return c
}

// Len is the number of nodes.
func (c *Cluster) Len() int { return len(c.opts) }

// Server returns node i's current server (nil before its first start).
func (c *Cluster) Server(i int) *server.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.servers[i]
}

// Name returns node i's server name.
func (c *Cluster) Name(i int) string { return c.opts[i].ServerName }

// Running reports whether node i is up.
func (c *Cluster) Running(i int) bool {
	s := c.Server(i)
	return s != nil && s.Running()
}

// Index returns the index of the node named name, or -1.
func (c *Cluster) Index(name string) int {
	for i, o := range c.opts {
		if o.ServerName == name {
			return i
		}
	}
	return -1
}

// Stop shuts node i down and waits until its store is closed. It does
// nothing if the node is not running.
func (c *Cluster) Stop(i int) {
	if s := c.Server(i); s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

// Start starts node i (again) on its store, with new ports, routed to the
// nodes that are running. It fails the test if the node does not start
// listening, naming the listener that failed.
func (c *Cluster) Start(i int) {
	c.t.Helper()
	c.mu.Lock()
	if s := c.servers[i]; s != nil && s.Running() {
		c.mu.Unlock()
		c.t.Fatalf("testenv: cluster node %s is already running", c.opts[i].ServerName)
		return
	}
	o := c.opts[i].Clone()
	o.Host, o.Port = "127.0.0.1", server.RANDOM_PORT
	if o.Cluster.Name == "" {
		o.Cluster.Name = c.name
	}
	o.Cluster.Host, o.Cluster.Port = "127.0.0.1", server.RANDOM_PORT
	var routes []string
	for j, s := range c.servers {
		if j != i && s != nil && s.Running() {
			if a := s.ClusterAddr(); a != nil {
				routes = append(routes, "nats-route://"+a.String())
			}
		}
	}
	o.Routes = server.RoutesFromStr(strings.Join(routes, ","))
	c.mu.Unlock()

	s, err := server.NewServer(o)
	if err != nil {
		c.t.Fatalf("testenv: cluster node %s: %v", o.ServerName, err)
		return
	}
	go s.Start()
	if !s.ReadyForConnections(20 * time.Second) {
		s.Shutdown()
		c.t.Fatalf("testenv: cluster node %s did not start listening within 20s", o.ServerName)
		return
	}
	c.mu.Lock()
	c.servers[i] = s
	c.mu.Unlock()
}

// URLs returns the client URLs of the running nodes, comma-separated (the
// form nats.Connect takes).
func (c *Cluster) URLs() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var u []string
	for _, s := range c.servers {
		if s == nil || !s.Running() {
			continue
		}
		if a, ok := s.Addr().(*net.TCPAddr); ok {
			u = append(u, fmt.Sprintf("nats://%s", a.String()))
		}
	}
	return strings.Join(u, ",")
}
