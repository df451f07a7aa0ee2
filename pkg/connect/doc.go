// Package connect sets up receiptflow's connections to NATS and Redis: URLs
// (one server or a cluster), credentials, TLS, the JetStream context with
// its publish ack timeout (Dialer), waiting for a server that is not up yet
// (WaitFor), and which errors mean a server was lost (Transient). Every
// service process, receiptctl and the in-process pipeline connect through
// it; it links no server.
package connect
