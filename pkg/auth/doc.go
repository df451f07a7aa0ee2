// Package auth holds what the services' HTTP doors share to admit a
// caller: the bearer tokens of a --tokens-file (Tokens: one
// `name:sha256-hex` line per holder, compared in constant time, the file
// read again when it changes so that removing a line revokes) and the
// loopback checks of a door without one (LoopbackListen, LoopbackPeer).
// The ingest service's front door (pkg/frontdoor) and the dashboard
// (pkg/dashboard) use it; it depends on neither.
package auth
