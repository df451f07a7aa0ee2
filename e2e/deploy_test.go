package e2e

// The deployment files, checked structurally (issue 6, point 5): they parse,
// and everything they name exists — services, Dockerfiles and the code they
// build, ports, volumes, config files, secrets and the credentials in them
// (each dev password matches its hash in deploy/nats/auth.conf and
// deploy/redis/users.acl), Kubernetes ConfigMaps, Secrets, Services and
// probes, and every metric the Grafana dashboard plots. With the compose
// plugin installed, `docker compose config` must accept the file too.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"go.yaml.in/yaml/v3"
	"golang.org/x/crypto/bcrypt"

	"github.com/receiptflow/receiptflow/pkg/auth"
)

const deployRoot = ".." // the repository, from e2e/

// deployNATSUsers are the principals of deploy/nats/auth.conf.
var deployNATSUsers = []string{"admin", "dashboard", "ingest", "producer", "publisher", "validator", "windower"}

// deployIngestSubscribe is what the ingest user may subscribe to besides
// its inbox: the front door's NATS endpoint in its queue group only, and
// the micro service's discovery subjects (docs/spec.md §10).
var deployIngestSubscribe = []string{"rf.submit ingest",
	"$SRV.PING", "$SRV.INFO", "$SRV.STATS",
	"$SRV.PING.ingest", "$SRV.INFO.ingest", "$SRV.STATS.ingest",
	"$SRV.PING.ingest.*", "$SRV.INFO.ingest.*", "$SRV.STATS.ingest.*"}

// deployRawWriters are the users whose publish rights reach rf.raw.*:
// the operator (admin) and the writers of RAW (ingest: the ingest service
// and receiptctl ingest). Nobody else may put anything into RAW.
var deployRawWriters = []string{"admin", "ingest"}

// natsSubjectMatch reports whether subject (no wildcards) matches the NATS
// subject pattern (with * and >).
func natsSubjectMatch(pattern, subject string) bool {
	pt, st := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, p := range pt {
		if p == ">" {
			return len(st) > i
		}
		if i >= len(st) || (p != "*" && p != st[i]) {
			return false
		}
	}
	return len(pt) == len(st)
}

func TestDeployNATSConfig(t *testing.T) {
	opts, err := server.ProcessConfigFile(secNATSConf)
	if err != nil {
		t.Fatalf("deploy/nats/nats.conf: %v", err)
	}
	if !opts.JetStream || !opts.SyncAlways || opts.StoreDir != "/data" {
		t.Errorf("jetstream enabled %v, sync_interval always %v, store %q; want true, true, /data", opts.JetStream, opts.SyncAlways, opts.StoreDir)
	}
	if opts.Cluster.Name == "" || opts.Cluster.Port != 6222 || opts.Port != 4222 || opts.HTTPPort != 8222 {
		t.Errorf("ports: client %d, cluster %q:%d, monitor %d", opts.Port, opts.Cluster.Name, opts.Cluster.Port, opts.HTTPPort)
	}
	if opts.NoAuthUser != "" {
		t.Errorf("no_auth_user %q lets clients in without credentials", opts.NoAuthUser)
	}
	var names []string
	for _, u := range opts.Users {
		names = append(names, u.Username)
		if u.Account == nil || u.Account.Name != "RECEIPTFLOW" {
			t.Errorf("user %s is not in account RECEIPTFLOW", u.Username)
		}
		pw, err := os.ReadFile(secPasswordFile("nats", u.Username))
		if err != nil {
			t.Errorf("user %s has no dev password file: %v", u.Username, err)
		} else if err := bcrypt.CompareHashAndPassword([]byte(u.Password), bytes.TrimRight(pw, "\r\n")); err != nil {
			t.Errorf("user %s: the dev password does not match the bcrypt hash in auth.conf: %v", u.Username, err)
		}
		p := u.Permissions
		if p == nil || p.Publish == nil || p.Subscribe == nil || len(p.Publish.Allow) == 0 {
			t.Errorf("user %s has no publish and subscribe allow lists", u.Username)
			continue
		}
		want := []string{"_INBOX." + u.Username + ".>"}
		if u.Username == "ingest" {
			want = append(want, deployIngestSubscribe...)
		}
		if got := p.Subscribe.Allow; !equalStrings(got, want) {
			t.Errorf("user %s may subscribe to %v, want only its own inbox and what its code serves %v", u.Username, got, want)
		}
		if p.Publish.Deny != nil || p.Subscribe.Deny != nil || p.Response != nil {
			t.Errorf("user %s has deny lists or allow_responses: the allow lists alone say what it may do", u.Username)
		}
		// Who may put anything into RAW.
		writesRaw := false
		for _, pat := range p.Publish.Allow {
			for part := 0; part < 8; part++ {
				if natsSubjectMatch(pat, fmt.Sprintf("rf.raw.%d", part)) {
					writesRaw = true
				}
			}
		}
		if writesRaw != containsString(deployRawWriters, u.Username) {
			t.Errorf("user %s may publish to rf.raw.*: %v; only %v may", u.Username, writesRaw, deployRawWriters)
		}
		if u.Username == "producer" && !equalStrings(p.Publish.Allow, []string{"rf.submit"}) {
			t.Errorf("user producer may publish to %v, want only the front door rf.submit", p.Publish.Allow)
		}
		if u.Username == "admin" {
			continue
		}
		for _, s := range p.Publish.Allow {
			switch s {
			case ">", "$JS.>", "$JS.API.>", "$KV.>", "rf.>", "$JS.ACK.>", "$JS.API.CONSUMER.>", "$JS.API.STREAM.>", "_INBOX.>", "$SRV.>":
				t.Errorf("service user %s has the blanket publish permission %q", u.Username, s)
			}
		}
	}
	sort.Strings(names)
	if !equalStrings(names, deployNATSUsers) {
		t.Errorf("users %v, want %v", names, deployNATSUsers)
	}
	// Each partition's durable is bound to that partition's subject only.
	perms := map[string][]string{}
	for _, u := range opts.Users {
		if u.Permissions != nil && u.Permissions.Publish != nil {
			perms[u.Username] = u.Permissions.Publish.Allow
		}
	}
	for p := 0; p < 8; p++ {
		for user, want := range map[string]string{
			"validator": fmt.Sprintf("$JS.API.CONSUMER.CREATE.RAW.validator-p%d.rf.raw.%d", p, p),
			"windower":  fmt.Sprintf("$JS.API.CONSUMER.CREATE.VALID.windower-p%d.rf.valid.%d", p, p),
		} {
			if !containsString(perms[user], want) {
				t.Errorf("%s lacks %s", user, want)
			}
		}
	}
}

// deployACLUser is one line of deploy/redis/users.acl.
type deployACLUser struct {
	on       bool
	hashes   []string
	keys     []string
	commands map[string]bool // +cmd (lower case), after -@all
	// selectors are the user's selectors, "(...)" each, as written: a
	// command they grant is allowed only on their keys.
	selectors []string
}

func deployReadACL(t *testing.T) map[string]deployACLUser {
	t.Helper()
	b, err := os.ReadFile(secRedisACL)
	if err != nil {
		t.Fatal(err)
	}
	users := map[string]deployACLUser{}
	for i, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "user" {
			t.Fatalf("users.acl:%d: %q is not a user line (the file format has no comments)", i+1, line)
		}
		u := deployACLUser{commands: map[string]bool{}}
		for i := 2; i < len(f); i++ {
			r := f[i]
			if strings.HasPrefix(r, "(") {
				sel := []string{}
				for ; i < len(f); i++ {
					sel = append(sel, f[i])
					if strings.HasSuffix(f[i], ")") {
						break
					}
				}
				u.selectors = append(u.selectors, strings.Join(sel, " "))
				continue
			}
			switch {
			case r == "on":
				u.on = true
			case r == "off":
				u.on = false
			case strings.HasPrefix(r, "#"):
				u.hashes = append(u.hashes, r[1:])
			case strings.HasPrefix(r, ">"):
				t.Errorf("users.acl: user %s has a clear-text password", f[1])
			case strings.HasPrefix(r, "~"), strings.HasPrefix(r, "%"):
				u.keys = append(u.keys, r)
			case strings.HasPrefix(r, "+"):
				u.commands[strings.ToLower(r[1:])] = true
			}
		}
		users[f[1]] = u
	}
	return users
}

func TestDeployRedisACL(t *testing.T) {
	users := deployReadACL(t)
	if d, ok := users["default"]; !ok || d.on {
		t.Errorf("the default user must be listed and off")
	}
	// The dashboard's explanation drawer reads partition keys: explain.lua
	// and HEXISTS of ledger shards (conflicts), nothing that writes.
	if got := users["dashboard"]; !equalStrings(got.keys, []string{"~rf:1:{p*}:*"}) ||
		!reflect.DeepEqual(got.commands, map[string]bool{"evalsha": true, "eval": true, "hget": true, "hgetall": true, "hexists": true, "ping": true, "hello": true}) {
		t.Errorf("user dashboard: keys %v, commands %v; want the partition keys, read commands only", got.keys, got.commands)
	}
	for _, name := range []string{"admin", "validator", "windower", "publisher", "dashboard", "probe"} {
		u, ok := users[name]
		if !ok || !u.on || len(u.hashes) != 1 {
			t.Errorf("user %s: listed %v, on %v, %d password hashes; want listed, on, one", name, ok, u.on, len(u.hashes))
			continue
		}
		sum := sha256.Sum256([]byte(secPassword(t, "redis", name)))
		if hex.EncodeToString(sum[:]) != u.hashes[0] {
			t.Errorf("user %s: the dev password does not match its SHA-256 in users.acl", name)
		}
		if name != "admin" && (u.commands["@all"] || containsString(u.keys, "~*")) {
			t.Errorf("service user %s has every command or every key", name)
		}
	}
	// The publisher deletes a window's explain records when it prunes the
	// window (ledger.Store.Forget): DEL of those keys and no other, as a
	// selector. No other user has one.
	for name, u := range users {
		want := []string(nil)
		if name == "publisher" {
			want = []string{"(~rf:1:{p*}:x:* -@all +del)"}
		}
		if !equalStrings(u.selectors, want) {
			t.Errorf("user %s: selectors %q, want %q", name, u.selectors, want)
		}
	}
	// A service reads Redis's eviction policy with INFO memory and never
	// needs CONFIG, which also reveals and changes secrets.
	for _, name := range []string{"validator", "windower", "publisher"} {
		if u := users[name]; !u.commands["info"] || u.commands["config"] || u.commands["config|get"] {
			t.Errorf("user %s: +info %v, +config %v; want INFO (the eviction policy check) and no CONFIG", name, u.commands["info"], u.commands["config"] || u.commands["config|get"])
		}
	}
	// Every command a ledger script calls is granted to the users that run
	// it (Redis 7 checks the caller's rights inside scripts). A new script
	// must be given to a user here.
	runners := map[string][]string{
		"apply.lua":    {"windower"},
		"retire.lua":   {"windower"},
		"read.lua":     {"windower", "publisher"},
		"claims.lua":   {"validator"},
		"progress.lua": {"validator"},
		// receiptctl explain against a deployment (an operator, as admin)
		// and the dashboard's explanation drawer.
		"explain.lua": {"admin", "dashboard"},
	}
	scripts, err := filepath.Glob(filepath.Join(deployRoot, "pkg", "ledger", "*.lua"))
	if err != nil || len(scripts) == 0 {
		t.Fatalf("no ledger scripts found: %v", err)
	}
	call := regexp.MustCompile(`redis\.call\(\s*'([A-Za-z]+)'`)
	for _, path := range scripts {
		name := filepath.Base(path)
		who, ok := runners[name]
		if !ok {
			t.Errorf("pkg/ledger/%s: which Redis user runs it? Grant its commands in deploy/redis/users.acl and list it in TestDeployRedisACL", name)
			continue
		}
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range call.FindAllStringSubmatch(string(src), -1) {
			for _, user := range who {
				if u := users[user]; !u.commands["@all"] && !u.commands[strings.ToLower(m[1])] {
					t.Errorf("%s calls %s, which users.acl does not grant to %s", name, m[1], user)
				}
			}
		}
	}
}

// deployCompose is the part of docker-compose.yml the test reads.
type deployCompose struct {
	Services map[string]struct {
		Image string `yaml:"image"`
		Build *struct {
			Context    string `yaml:"context"`
			Dockerfile string `yaml:"dockerfile"`
		} `yaml:"build"`
		Command     []string          `yaml:"command"`
		Environment map[string]string `yaml:"environment"`
		Volumes     []string          `yaml:"volumes"`
		Secrets     []string          `yaml:"secrets"`
		Ports       []string          `yaml:"ports"`
		DependsOn   map[string]struct {
			Condition string `yaml:"condition"`
		} `yaml:"depends_on"`
		Profiles []string `yaml:"profiles"`
	} `yaml:"services"`
	Secrets map[string]struct {
		File string `yaml:"file"`
	} `yaml:"secrets"`
	Volumes map[string]any `yaml:"volumes"`
}

func TestDeployCompose(t *testing.T) {
	path := filepath.Join(deployRoot, "docker-compose.yml")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var c deployCompose
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	natsUsers := map[string]bool{}
	for _, u := range deployNATSUsers {
		natsUsers[u] = true
	}
	aclUsers := deployReadACL(t)
	hostPorts := map[string]string{}
	windowerIdx := map[string]bool{} // the scalable services seen
	var natsNodes []string
	for name, s := range c.Services {
		if s.Image == "" && s.Build == nil {
			t.Errorf("service %s has neither image nor build", name)
		}
		if s.Image != "" && (!strings.Contains(s.Image, ":") || strings.HasSuffix(s.Image, ":latest")) {
			t.Errorf("service %s: image %q is not pinned", name, s.Image)
		}
		if strings.HasPrefix(s.Image, "nats:") {
			natsNodes = append(natsNodes, name)
		}
		if s.Build != nil {
			deployCheckDockerfile(t, name, filepath.Join(deployRoot, s.Build.Context, s.Build.Dockerfile))
		}
		for dep := range s.DependsOn {
			if _, ok := c.Services[dep]; !ok {
				t.Errorf("service %s depends on %s, which does not exist", name, dep)
			}
		}
		for _, v := range s.Volumes {
			src, _, _ := strings.Cut(v, ":")
			if strings.HasPrefix(src, ".") || strings.HasPrefix(src, "/") {
				if _, err := os.Stat(filepath.Join(deployRoot, src)); err != nil {
					t.Errorf("service %s mounts %s: %v", name, src, err)
				}
			} else if _, ok := c.Volumes[src]; !ok {
				t.Errorf("service %s uses volume %s, which is not declared", name, src)
			}
		}
		for _, sec := range s.Secrets {
			if _, ok := c.Secrets[sec]; !ok {
				t.Errorf("service %s uses secret %s, which is not declared", name, sec)
			}
		}
		for _, p := range s.Ports {
			parts := strings.Split(p, ":")
			if len(parts) != 3 || parts[0] != "127.0.0.1" {
				t.Errorf("service %s publishes %q: want 127.0.0.1:host:container", name, p)
				continue
			}
			if other, dup := hostPorts[parts[1]]; dup {
				t.Errorf("host port %s published by %s and %s", parts[1], other, name)
			}
			hostPorts[parts[1]] = name
		}
		env := s.Environment
		for k, v := range env {
			if strings.HasSuffix(k, "_FILE") {
				sec, ok := strings.CutPrefix(v, "/run/secrets/")
				if !ok || !containsString(s.Secrets, sec) {
					t.Errorf("service %s: %s=%s is not one of its secrets %v", name, k, v, s.Secrets)
				}
			}
			if strings.Contains(strings.ToUpper(k), "PASSWORD") && !strings.HasSuffix(k, "_FILE") {
				t.Errorf("service %s passes a password in the environment (%s)", name, k)
			}
		}
		// Credentials: the user exists and its password file is the one
		// whose hash auth.conf / users.acl hold.
		for _, pair := range [][3]string{{"NATS_USER", "NATS_PASSWORD_FILE", "nats"}, {"REDIS_USERNAME", "REDIS_PASSWORD_FILE", "redis"}} {
			user := env[pair[0]]
			if user == "" {
				continue
			}
			if pair[2] == "nats" && !natsUsers[user] {
				t.Errorf("service %s logs in to NATS as %q, not a user of auth.conf", name, user)
			}
			if u, ok := aclUsers[user]; pair[2] == "redis" && (!ok || !u.on) {
				t.Errorf("service %s logs in to Redis as %q, not an enabled user of users.acl", name, user)
			}
			sec, _ := strings.CutPrefix(env[pair[1]], "/run/secrets/")
			file := c.Secrets[sec].File
			if filepath.Clean(filepath.Join(deployRoot, file)) != filepath.Clean(secPasswordFile(pair[2], user)) {
				t.Errorf("service %s: %s user %s reads %s, want %s", name, pair[2], user, file, secPasswordFile(pair[2], user))
			}
		}
		// The ingest service creates nothing either: it has no such flag and
		// waits for RAW (docs/spec.md §10).
		if (env["REDIS_URL"] != "" || env["NATS_USER"] != "") && name != "setup" && name != "dashboard" && name != "ingest" {
			if env["RECEIPTS_ENSURE_STREAMS"] != "false" {
				t.Errorf("service %s may try to create streams (RECEIPTS_ENSURE_STREAMS=%q)", name, env["RECEIPTS_ENSURE_STREAMS"])
			}
		}
		// Validators and windowers scale with --scale: no index (they
		// share the partitions through leases), no published port.
		if name == "validator" || name == "windower" {
			for _, k := range []string{"RECEIPTS_INSTANCE", "RECEIPTS_INSTANCES", "RECEIPTS_OWNED"} {
				if _, ok := env[k]; ok {
					t.Errorf("%s sets %s: it cannot be scaled with --scale", name, k)
				}
			}
			if len(s.Ports) > 0 {
				t.Errorf("%s publishes ports %v: a second replica would clash", name, s.Ports)
			}
			windowerIdx[name] = true
		}
	}
	if !windowerIdx["validator"] || !windowerIdx["windower"] {
		t.Errorf("scalable services %v, want validator and windower", windowerIdx)
	}
	for name, sec := range c.Secrets {
		if _, err := os.Stat(filepath.Join(deployRoot, sec.File)); err != nil {
			t.Errorf("secret %s: %v", name, err)
		}
	}
	// Three NATS nodes, each named once, routed to all three.
	sort.Strings(natsNodes)
	if len(natsNodes) != 3 {
		t.Fatalf("NATS nodes %v, want 3", natsNodes)
	}
	for _, n := range natsNodes {
		cmd := strings.Join(c.Services[n].Command, " ")
		if !strings.Contains(cmd, "--name "+n) {
			t.Errorf("NATS node %s is not started with --name %s: %s", n, n, cmd)
		}
		for _, peer := range natsNodes {
			if !strings.Contains(cmd, "nats-route://"+peer+":6222") {
				t.Errorf("NATS node %s has no route to %s", n, peer)
			}
		}
	}
	for _, name := range []string{"setup", "validator", "windower", "publisher", "dashboard", "ingest", "redis"} {
		if _, ok := c.Services[name]; !ok {
			t.Errorf("service %s missing", name)
		}
	}
	// The front door: NATS only, as the ingest user, its HTTP door on all
	// interfaces of the container behind a tokens file (a compose secret),
	// published on 127.0.0.1:8090, and time to drain on SIGTERM.
	if s := c.Services["ingest"]; s.Environment["NATS_USER"] != "ingest" || s.Environment["REDIS_URL"] != "" ||
		!strings.Contains(strings.Join(s.Command, " "), "--listen 0.0.0.0:8090") || !containsString(s.Ports, "127.0.0.1:8090:8090") ||
		s.Environment["RECEIPTS_HTTP_ADDR"] == "" {
		t.Errorf("ingest: want NATS user ingest, no Redis, --listen 0.0.0.0:8090 published on 127.0.0.1:8090, RECEIPTS_HTTP_ADDR; got %v %v %v", s.Command, s.Environment, s.Ports)
	} else if tf := s.Environment["RECEIPTS_TOKENS_FILE"]; tf == "" {
		t.Errorf("ingest listens beyond loopback without RECEIPTS_TOKENS_FILE")
	} else {
		sec, _ := strings.CutPrefix(tf, "/run/secrets/")
		deployCheckTokens(t, "compose ingest", filepath.Join(deployRoot, c.Secrets[sec].File))
	}
	if s := c.Services["setup"]; !containsString(s.Command, "--ensure-only") || !containsString(s.Command, "3") || s.Environment["NATS_USER"] != "admin" {
		t.Errorf("the set-up job must run --ensure-only --replicas 3 as admin: %v %v", s.Command, s.Environment)
	}

	// The Prometheus targets are compose services.
	pb, err := os.ReadFile(filepath.Join(deployRoot, "deploy/prometheus/prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var prom struct {
		ScrapeConfigs []struct {
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(pb, &prom); err != nil {
		t.Fatalf("prometheus.yml: %v", err)
	}
	for _, sc := range prom.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			for _, target := range st.Targets {
				host, port, _ := strings.Cut(target, ":")
				s, ok := c.Services[host]
				if !ok {
					t.Errorf("prometheus scrapes %s, not a compose service", target)
					continue
				}
				if addr := s.Environment["RECEIPTS_HTTP_ADDR"]; addr != "" && !strings.HasSuffix(addr, ":"+port) {
					t.Errorf("prometheus scrapes %s, the service listens on %s", target, addr)
				}
			}
		}
	}

	// Compose's own validation: the plugin where installed, else the
	// standalone docker-compose (Debian's 1.x; needs no engine either).
	var compose []string
	if err := exec.Command("docker", "compose", "version").Run(); err == nil {
		compose = []string{"docker", "compose"}
	} else if _, err := exec.LookPath("docker-compose"); err == nil {
		compose = []string{"docker-compose"}
	}
	if compose == nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("neither the docker compose plugin nor docker-compose is installed; .ci/run installs docker-compose")
		}
		t.Logf("!!! neither the docker compose plugin nor docker-compose is installed: compose validation NOT run (structural checks only) !!!")
		return
	}
	cmd := exec.Command(compose[0], append(compose[1:], "-f", path, "config", "--quiet")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("%s config: %v\n%s", strings.Join(compose, " "), err, out)
	}
	ver, _ := exec.Command(compose[0], append(compose[1:], "version", "--short")...).Output()
	t.Logf("%s config accepts the file (version %s)", strings.Join(compose, " "), strings.TrimSpace(string(ver)))
}

// deployCheckTokens checks a tokens file of the ingest service: it loads
// as the service loads it (name:sha256-hex lines), and admits the dev
// token the docs name (docs/deployment.md) and nothing else.
func deployCheckTokens(t *testing.T, who, path string) {
	t.Helper()
	tokens, err := auth.LoadTokens(path)
	if err != nil {
		t.Errorf("%s: %v", who, err)
		return
	}
	if name, ok := tokens.Check(deployDevToken); !ok || name != "dev" {
		t.Errorf("%s: %s does not admit the documented dev token as \"dev\"", who, path)
	}
	if _, ok := tokens.Check("not-" + deployDevToken); ok {
		t.Errorf("%s: %s admits a token it should not", who, path)
	}
}

// deployDevToken is the dev bearer token of deploy/secrets/dev/ingest.tokens,
// documented in docs/deployment.md (local use only).
const deployDevToken = "rf-dev-token-local-only"

// deployCheckDockerfile checks a service Dockerfile: multi-stage, a static
// build of an existing services/<dir>, a non-root numeric user.
func deployCheckDockerfile(t *testing.T, service, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("service %s: %v", service, err)
		return
	}
	df := string(b)
	if strings.Count(df, "\nFROM ") < 2 || !strings.Contains(df, "CGO_ENABLED=0") {
		t.Errorf("%s: want a multi-stage build of a static binary", path)
	}
	m := regexp.MustCompile(`\./services/([a-z]+)\s*$`).FindStringSubmatch(strings.Split(df[strings.Index(df, "go build"):], "\n")[0])
	if m == nil {
		t.Errorf("%s: no `go build ... ./services/<name>`", path)
	} else if _, err := os.Stat(filepath.Join(deployRoot, "services", m[1], "main.go")); err != nil {
		t.Errorf("%s builds ./services/%s: %v", path, m[1], err)
	}
	u := regexp.MustCompile(`(?m)^USER (\d+)(:\d+)?$`).FindStringSubmatch(df)
	if u == nil || u[1] == "0" {
		t.Errorf("%s: want a numeric non-root USER", path)
	}
}

// deployK8sDoc is a Kubernetes object as the test reads it.
type deployK8sDoc map[string]any

func TestDeployKubernetes(t *testing.T) {
	kb, err := os.ReadFile(filepath.Join(deployRoot, "deploy/kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var kust struct {
		Namespace          string   `yaml:"namespace"`
		Resources          []string `yaml:"resources"`
		ConfigMapGenerator []struct {
			Name  string   `yaml:"name"`
			Files []string `yaml:"files"`
		} `yaml:"configMapGenerator"`
		SecretGenerator []struct {
			Name  string   `yaml:"name"`
			Files []string `yaml:"files"`
		} `yaml:"secretGenerator"`
		Images []struct {
			Name string `yaml:"name"`
		} `yaml:"images"`
	}
	if err := yaml.Unmarshal(kb, &kust); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	// What the generators make: name -> keys.
	configMaps, secrets := map[string][]string{}, map[string][]string{}
	gen := func(into map[string][]string, name string, files []string) {
		for _, f := range files {
			key, file, ok := strings.Cut(f, "=")
			if !ok {
				file, key = f, filepath.Base(f)
			}
			if _, err := os.Stat(filepath.Join(deployRoot, "deploy", file)); err != nil {
				t.Errorf("generator %s: %v", name, err)
			}
			into[name] = append(into[name], key)
		}
	}
	for _, g := range kust.ConfigMapGenerator {
		gen(configMaps, g.Name, g.Files)
	}
	for _, g := range kust.SecretGenerator {
		gen(secrets, g.Name, g.Files)
	}
	// Every generated credential file is the dev password of a user that
	// exists.
	for name, keys := range secrets {
		if principal, ok := strings.CutSuffix(name, "-credentials"); ok && principal != "redis-probe" {
			for _, k := range keys {
				system := strings.TrimSuffix(k, "-password")
				if system == "nats" && !containsString(deployNATSUsers, principal) {
					t.Errorf("secret %s: %s is not a NATS user", name, principal)
				}
			}
		}
	}
	images := map[string]bool{}
	for _, im := range kust.Images {
		images[im.Name] = true
	}

	var docs []deployK8sDoc
	for _, r := range kust.Resources {
		b, err := os.ReadFile(filepath.Join(deployRoot, "deploy", r))
		if err != nil {
			t.Errorf("resource %s: %v", r, err)
			continue
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			// Into a plain map: yaml decodes nested maps into the named type
			// of the target.
			var raw map[string]any
			if err := dec.Decode(&raw); err != nil {
				if err.Error() == "EOF" {
					break
				}
				t.Fatalf("%s: %v", r, err)
			}
			if raw == nil {
				continue
			}
			d := deployK8sDoc(raw)
			if d.str("apiVersion") == "" || d.str("kind") == "" || d.str("metadata", "name") == "" {
				t.Errorf("%s: an object without apiVersion, kind or name: %v", r, d)
			}
			docs = append(docs, d)
		}
	}
	byKind := map[string]map[string]deployK8sDoc{}
	for _, d := range docs {
		if byKind[d.str("kind")] == nil {
			byKind[d.str("kind")] = map[string]deployK8sDoc{}
		}
		byKind[d.str("kind")][d.str("metadata", "name")] = d
	}
	for _, kind := range []string{"StatefulSet", "Deployment", "Job", "Service", "Namespace", "NetworkPolicy", "PodDisruptionBudget"} {
		if len(byKind[kind]) == 0 {
			t.Errorf("no %s", kind)
		}
	}
	if ns := byKind["Namespace"][kust.Namespace]; ns == nil {
		t.Errorf("namespace %s is not defined", kust.Namespace)
	}

	// Workloads: volumes, mounts, env, probes, security.
	type pod struct {
		owner  string
		labels map[string]any
		ports  map[string]bool
	}
	var pods []pod
	for _, kind := range []string{"StatefulSet", "Deployment", "Job"} {
		for name, d := range byKind[kind] {
			owner := kind + "/" + name
			tmpl := d.get("spec", "template")
			spec := deployK8sDoc(asMap(tmpl["spec"]))
			p := pod{owner: owner, labels: asMap(deployK8sDoc(tmpl).get("metadata")["labels"]), ports: map[string]bool{}}
			if kind != "Job" {
				sel := asMap(d.get("spec", "selector")["matchLabels"])
				for k, v := range sel {
					if p.labels[k] != v {
						t.Errorf("%s: selector %s=%v does not match the pod labels", owner, k, v)
					}
				}
			}
			if sc := asMap(spec["securityContext"]); sc["runAsNonRoot"] != true {
				t.Errorf("%s: runAsNonRoot is not set", owner)
			}
			vols := map[string]bool{}
			for _, v := range asList(spec["volumes"]) {
				vm := deployK8sDoc(asMap(v))
				vols[vm.str("name")] = true
				if n := vm.str("configMap", "name"); n != "" && configMaps[n] == nil {
					t.Errorf("%s: ConfigMap %s is not generated", owner, n)
				}
				if n := vm.str("secret", "secretName"); n != "" && secrets[n] == nil {
					t.Errorf("%s: Secret %s is not generated", owner, n)
				}
				for _, src := range asList(vm.get("projected")["sources"]) {
					sm := deployK8sDoc(asMap(src))
					if n := sm.str("configMap", "name"); n != "" && configMaps[n] == nil {
						t.Errorf("%s: ConfigMap %s is not generated", owner, n)
					}
					if n := sm.str("secret", "name"); n != "" && secrets[n] == nil {
						t.Errorf("%s: Secret %s is not generated", owner, n)
					}
				}
			}
			for _, vct := range asList(d.get("spec")["volumeClaimTemplates"]) {
				vols[deployK8sDoc(asMap(vct)).str("metadata", "name")] = true
			}
			for _, c := range asList(spec["containers"]) {
				cm := deployK8sDoc(asMap(c))
				cname := owner + "/" + cm.str("name")
				image := cm.str("image")
				if strings.HasPrefix(image, "receiptflow/") {
					if !images[image] {
						t.Errorf("%s: image %s gets no tag from the kustomization", cname, image)
					}
					svc := strings.TrimPrefix(image, "receiptflow/")
					deployCheckDockerfile(t, svc, filepath.Join(deployRoot, "services", svc, "Dockerfile"))
				} else if !strings.Contains(image, ":") {
					t.Errorf("%s: image %s is not pinned", cname, image)
				}
				if sc := asMap(cm["securityContext"]); sc["allowPrivilegeEscalation"] != false {
					t.Errorf("%s: allowPrivilegeEscalation is not false", cname)
				}
				mounts := map[string]string{}
				for _, m := range asList(cm["volumeMounts"]) {
					mm := deployK8sDoc(asMap(m))
					if !vols[mm.str("name")] {
						t.Errorf("%s mounts volume %s, which the pod does not define", cname, mm.str("name"))
					}
					mounts[mm.str("mountPath")] = mm.str("name")
				}
				for _, port := range asList(cm["ports"]) {
					pm := deployK8sDoc(asMap(port))
					p.ports[pm.str("name")] = true
					p.ports[fmt.Sprint(pm["containerPort"])] = true
				}
				env := map[string]string{}
				for _, e := range asList(cm["env"]) {
					em := deployK8sDoc(asMap(e))
					env[em.str("name")] = em.str("value")
					if n := em.str("valueFrom", "secretKeyRef", "name"); n != "" && secrets[n] == nil {
						t.Errorf("%s: Secret %s is not generated", cname, n)
					}
				}
				// A *_FILE is in a mounted Secret that has that key.
				for k, v := range env {
					if !strings.HasSuffix(k, "_FILE") {
						continue
					}
					dir, key := filepath.Dir(v), filepath.Base(v)
					volName := mounts[dir]
					found := false
					for _, v := range asList(spec["volumes"]) {
						vm := deployK8sDoc(asMap(v))
						if vm.str("name") == volName && containsString(secrets[vm.str("secret", "secretName")], key) {
							found = true
						}
					}
					if !found {
						t.Errorf("%s: %s=%s is not a key of a Secret mounted at %s", cname, k, v, dir)
					}
				}
				if user := env["NATS_USER"]; user != "" && !containsString(deployNATSUsers, user) {
					t.Errorf("%s: NATS user %s is not in auth.conf", cname, user)
				}
				if user := env["REDIS_USERNAME"]; user != "" {
					if u, ok := deployReadACL(t)[user]; !ok || !u.on {
						t.Errorf("%s: Redis user %s is not an enabled user of users.acl", cname, user)
					}
					if p.labels["receiptflow.io/redis-client"] != "true" {
						t.Errorf("%s uses Redis but the Redis NetworkPolicy keeps it out", cname)
					}
					// The dashboard creates nothing (it has no such flag).
					if env["RECEIPTS_ENSURE_STREAMS"] != "false" && cm.str("name") != "dashboard" {
						t.Errorf("%s may try to create streams", cname)
					}
				}
				// Validators and windowers are Deployments without an
				// index: they share the partitions through leases, and an
				// autoscaler may change their replicas.
				if n := cm.str("name"); n == "windower" || n == "validator" {
					if kind != "Deployment" {
						t.Errorf("%s: a %s, want a Deployment (no index)", cname, kind)
					}
					for _, k := range []string{"RECEIPTS_INSTANCE", "RECEIPTS_INSTANCES"} {
						if _, ok := env[k]; ok {
							t.Errorf("%s sets %s: the replicas would not share the partitions through leases", cname, k)
						}
					}
					if st := d.str("spec", "strategy", "type"); st == "Recreate" {
						t.Errorf("%s: strategy Recreate stops every replica at once; leases hand partitions over on a rolling update", cname)
					}
				}
				for _, probe := range []string{"readinessProbe", "livenessProbe"} {
					if port := cm.str(probe, "httpGet", "port"); port != "" && !p.ports[port] {
						t.Errorf("%s: %s uses port %s, which the container does not expose", cname, probe, port)
					}
				}
			}
			pods = append(pods, p)
		}
	}
	// Every Service selects a pod and targets one of its ports.
	for name, svc := range byKind["Service"] {
		sel := asMap(svc.get("spec")["selector"])
		var match *pod
		for i := range pods {
			ok := len(sel) > 0
			for k, v := range sel {
				if pods[i].labels[k] != v {
					ok = false
				}
			}
			if ok {
				match = &pods[i]
			}
		}
		if match == nil {
			t.Errorf("Service %s selects no pod", name)
			continue
		}
		for _, port := range asList(svc.get("spec")["ports"]) {
			target := fmt.Sprint(asMap(port)["targetPort"])
			if !match.ports[target] {
				t.Errorf("Service %s targets port %s, which %s does not expose", name, target, match.owner)
			}
		}
	}
	// Every HorizontalPodAutoscaler scales a validator or windower
	// Deployment that exists, between 1 and at most P replicas (more would
	// idle: a partition is the unit of work), or the ingest Deployment
	// (no partitions: not bounded by P).
	if len(byKind["HorizontalPodAutoscaler"]) == 0 {
		t.Errorf("no HorizontalPodAutoscaler example")
	}
	for name, h := range byKind["HorizontalPodAutoscaler"] {
		ref := h.get("spec", "scaleTargetRef")
		target := fmt.Sprint(ref["name"])
		if ref["kind"] != "Deployment" || byKind["Deployment"][target] == nil || (target != "validator" && target != "windower" && target != "ingest") {
			t.Errorf("HorizontalPodAutoscaler %s scales %v %v, want the validator, windower or ingest Deployment", name, ref["kind"], target)
		}
		lo, hi := asInt(h.get("spec")["minReplicas"]), asInt(h.get("spec")["maxReplicas"])
		if target != "ingest" && (lo < 1 || hi < lo || hi > 8) {
			t.Errorf("HorizontalPodAutoscaler %s: replicas %d..%d, want 1 <= min <= max <= 8 (P)", name, lo, hi)
		}
		if target == "ingest" && (lo < 1 || hi < lo) {
			t.Errorf("HorizontalPodAutoscaler %s: replicas %d..%d, want 1 <= min <= max", name, lo, hi)
		}
	}
	deployCheckK8sIngest(t, byKind, secrets, kust.SecretGenerator)
	// StatefulSets name an existing (headless) Service.
	for name, ss := range byKind["StatefulSet"] {
		if sn := ss.str("spec", "serviceName"); byKind["Service"][sn] == nil {
			t.Errorf("StatefulSet %s: serviceName %s is not a Service", name, sn)
		}
	}
	if r := asInt(byKind["StatefulSet"]["nats"].get("spec")["replicas"]); r != 3 {
		t.Errorf("NATS has %d replicas, want 3", r)
	}
}

// deployCheckK8sIngest checks the front door's objects: a Deployment
// logged in to NATS as ingest (no Redis), its HTTP door on all interfaces
// behind a tokens file from a Secret (the dev token only), probes on
// /readyz and /healthz, time to drain on SIGTERM after the preStop wait,
// a Service on the door, and an autoscaler.
func deployCheckK8sIngest(t *testing.T, byKind map[string]map[string]deployK8sDoc, secrets map[string][]string, gens []struct {
	Name  string   `yaml:"name"`
	Files []string `yaml:"files"`
}) {
	t.Helper()
	d := byKind["Deployment"]["ingest"]
	if d == nil {
		t.Errorf("no ingest Deployment")
		return
	}
	spec := deployK8sDoc(asMap(d.get("spec", "template")["spec"]))
	containers := asList(spec["containers"])
	if len(containers) != 1 {
		t.Fatalf("ingest: %d containers, want 1", len(containers))
	}
	c := deployK8sDoc(asMap(containers[0]))
	var args []string
	for _, a := range asList(c["args"]) {
		args = append(args, fmt.Sprint(a))
	}
	env := map[string]string{}
	for _, e := range asList(c["env"]) {
		em := deployK8sDoc(asMap(e))
		env[em.str("name")] = em.str("value")
	}
	joined := strings.Join(args, " ")
	if !strings.Contains(joined, "--listen 0.0.0.0:8090") || env["RECEIPTS_TOKENS_FILE"] == "" {
		t.Errorf("ingest: args %v, RECEIPTS_TOKENS_FILE %q; want --listen 0.0.0.0:8090 with a tokens file", args, env["RECEIPTS_TOKENS_FILE"])
	}
	if env["NATS_USER"] != "ingest" || env["REDIS_URL"] != "" || env["REDIS_USERNAME"] != "" {
		t.Errorf("ingest: NATS user %q, Redis %q %q; want ingest and no Redis", env["NATS_USER"], env["REDIS_URL"], env["REDIS_USERNAME"])
	}
	if c.str("readinessProbe", "httpGet", "path") != "/readyz" || c.str("livenessProbe", "httpGet", "path") != "/healthz" {
		t.Errorf("ingest: readiness %q, liveness %q; want /readyz and /healthz", c.str("readinessProbe", "httpGet", "path"), c.str("livenessProbe", "httpGet", "path"))
	}
	// SIGTERM comes after preStop; the drain and the leave must fit in
	// what is left of the grace period.
	drain := 30 // the service's default --drain-timeout
	for i, a := range args {
		if a == "--drain-timeout" && i+1 < len(args) {
			fmt.Sscanf(args[i+1], "%ds", &drain)
		}
	}
	preStop := asInt(c.get("lifecycle", "preStop", "sleep")["seconds"])
	if grace := asInt(spec["terminationGracePeriodSeconds"]); grace < preStop+drain+5 {
		t.Errorf("ingest: terminationGracePeriodSeconds %d < preStop %ds + --drain-timeout %ds + 5s to leave as a source", grace, preStop, drain)
	}
	if preStop == 0 {
		t.Errorf("ingest: no preStop wait: the Service may still send it connections after SIGTERM")
	}
	// The tokens file is a key of a generated Secret: the dev tokens.
	for _, g := range gens {
		if g.Name != "ingest-tokens" {
			continue
		}
		for _, f := range g.Files {
			_, file, _ := strings.Cut(f, "=")
			deployCheckTokens(t, "kustomization ingest-tokens", filepath.Join(deployRoot, "deploy", file))
		}
	}
	if secrets["ingest-tokens"] == nil {
		t.Errorf("no ingest-tokens Secret generated")
	}
	if svc := byKind["Service"]["ingest"]; svc == nil {
		t.Errorf("no ingest Service")
	}
	if byKind["HorizontalPodAutoscaler"]["ingest"] == nil {
		t.Errorf("no ingest HorizontalPodAutoscaler")
	}
}

func TestDeployGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(deployRoot, "deploy/grafana/dashboards/receiptflow.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	known := deployKnownMetrics(t)
	name := regexp.MustCompile(`receiptflow_[a-z_]+`)
	used := map[string]bool{}
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q plots nothing", p.Title)
		}
		for _, tg := range p.Targets {
			for _, m := range name.FindAllString(tg.Expr, -1) {
				base := m
				for _, suf := range []string{"_bucket", "_sum", "_count"} {
					if b, ok := strings.CutSuffix(m, suf); ok && known[b] {
						base = b
					}
				}
				if !known[base] {
					t.Errorf("panel %q plots %s, which no service exposes", p.Title, m)
				}
				used[base] = true
			}
		}
	}
	// The list: events in/out, dedup, late and corrected, watermark
	// and lag, consumer pending, batch sizes, script latency, KV writes,
	// state size.
	for _, m := range []string{"receiptflow_validator_messages_in_total", "receiptflow_windower_events_total", "receiptflow_windower_watermark_lag_seconds",
		"receiptflow_windower_consumer_pending_messages", "receiptflow_windower_batch_size_messages", "receiptflow_windower_script_seconds",
		"receiptflow_publisher_kv_writes_total", "receiptflow_windower_state_ledger_entries"} {
		if !used[m] {
			t.Errorf("the dashboard does not plot %s", m)
		}
	}
	t.Logf("%d panels, %d metrics", len(dash.Panels), len(used))
}

// deployKnownMetrics returns the metric names the code registers:
// "receiptflow_..." literals, and the per-service ones (ns + "...": every
// service process's, pkg/daemon and pkg/service).
func deployKnownMetrics(t *testing.T) map[string]bool {
	t.Helper()
	known := map[string]bool{}
	lit := regexp.MustCompile(`"(receiptflow_[a-z_]+)"`)
	perSvc := regexp.MustCompile(`\bns ?\+ ?"([a-z_]+)"`)
	err := filepath.Walk(filepath.Join(deployRoot, "pkg"), func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range lit.FindAllStringSubmatch(string(b), -1) {
			known[m[1]] = true
		}
		if strings.Contains(path, filepath.Join("pkg", "daemon")) || strings.Contains(path, filepath.Join("pkg", "service")) {
			for _, m := range perSvc.FindAllStringSubmatch(string(b), -1) {
				for _, svc := range []string{"validator", "windower", "publisher"} {
					known["receiptflow_"+svc+"_"+m[1]] = true
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return known
}

func (d deployK8sDoc) get(path ...string) map[string]any {
	cur := map[string]any(d)
	for _, p := range path {
		cur = asMap(cur[p])
	}
	return cur
}

func (d deployK8sDoc) str(path ...string) string {
	m := d.get(path[:len(path)-1]...)
	s, _ := m[path[len(path)-1]].(string)
	return s
}

func asMap(v any) map[string]any {
	switch m := v.(type) {
	case map[string]any:
		return m
	case deployK8sDoc:
		return m
	}
	return nil
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

func asInt(v any) int {
	n, _ := v.(int)
	return n
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func containsString(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}
