//go:build unix

package testenv

import (
	"errors"
	"os"
	"syscall"
)

// lockPort takes an exclusive, non-blocking flock on path. ok is false if
// another process holds it. The lock lasts as long as the returned file is
// open (at the latest, until the process ends).
func lockPort(path string) (f *os.File, ok bool, err error) {
	f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return nil, false, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, err
	}
	return f, true, nil
}
