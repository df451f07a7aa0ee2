// Package testenv starts real servers for tests: an in-process JetStream
// nats-server, a real redis-server child process and a miniredis, each on
// 127.0.0.1 and a free port, with data in t.TempDir() and stopped by
// t.Cleanup. It also has CheckFor, the polling helper tests use instead of
// sleeping.
//
// A suite that needs redis-server never skips silently: without the binary it
// fails under CI=true and skips with a loud message otherwise.
package testenv
