//go:build !unix

package testenv

import "os"

// lockPort is a plain exclusive create where flock is missing: a file left
// by a process that ended keeps its port from later runs, which costs a
// port, never a collision.
func lockPort(path string) (*os.File, bool, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o666)
	if os.IsExist(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return f, true, nil
}
