// Package embedded starts the in-process servers behind receiptflow's
// embedded default: a nats-server with JetStream on a file store and a
// miniredis. receiptctl uses them when no --nats-url / --redis-url is given,
// and tests use them through package testenv.
package embedded
