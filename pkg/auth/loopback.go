package auth

import "net"

// LoopbackListen reports whether the listen address addr (host:port)
// binds the loopback only: a loopback IP or "localhost". ":8080" and
// "0.0.0.0:8080" bind every interface.
func LoopbackListen(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// LoopbackPeer reports whether a peer address (an http.Request's
// RemoteAddr, host:port) is on the loopback.
func LoopbackPeer(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
