// Package embedded starts the in-process servers behind receiptflow's
// embedded default: a nats-server with JetStream on a file store and a
// miniredis. receiptctl uses them when no --nats-url / --redis-url is given,
// and tests use them through package testenv.
//
// # NATS
//
// StartNATS is safe to call concurrently for different store directories;
// two servers must never share one StoreDir. A server started again on the
// same StoreDir finds its streams, consumers and KV buckets again. It fails
// if StoreDir is empty or cannot be created, if nats-server rejects the
// options, or if the server is not ready within the timeout (port in use,
// store not writable, ...).
//
// Durability (nats-server v2.15.2, server/filestore.go): a one-replica file
// stream writes each message to its block file with a write system call
// (flush in place, writeMsgRecordLocked → flushPendingMsgsLocked) before
// storeMsg returns, and the publish ack is sent only after that. A SIGKILL
// of nats-server therefore loses no acknowledged message: the data is in the
// kernel's page cache, which outlives the process
// (TestAckedPublishSurvivesSIGKILL kills a real server process to show it).
// A power loss or kernel crash may lose what was written since the last
// fsync, up to DefaultSyncInterval. NATSConfig.SyncAlways closes that gap at
// the cost measured by `make bench` (row "B0 publish sync always",
// docs/performance.md). Streams of more than one replica (and streams with
// PersistMode async, which receiptflow never sets) flush asynchronously
// unless SyncAlways is set; there the Raft log, written in place, is what
// survives a SIGKILL of one node.
//
// # Redis
//
// miniredis keeps everything in memory and runs Lua scripts through
// gopher-lua: it is for the embedded default and tests, not for durability.
package embedded
