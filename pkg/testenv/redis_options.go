package testenv

// RedisOption changes how RedisServer configures redis-server.
type RedisOption func(*redisConfig)

type redisConfig struct {
	aof  bool
	args []string
}

// WithAOF turns the append-only file on with `appendfsync always`, so every
// write acknowledged to a client survives RedisProc.Kill and Restart.
// Without it the server keeps data in memory only (`appendonly no`,
// `save ""`) and a restart starts empty.
func WithAOF() RedisOption {
	return func(c *redisConfig) { c.aof = true }
}

// WithArgs appends command-line configuration to redis-server, e.g.
// WithArgs("--maxmemory", "64mb", "--maxmemory-policy", "noeviction").
// Command-line settings override the generated config file.
func WithArgs(args ...string) RedisOption {
	return func(c *redisConfig) { c.args = append(c.args, args...) }
}
