//go:build !linux

package testenv

import "os/exec"

// setChildAttrs has nothing to add outside Linux: the child is killed by
// t.Cleanup only.
func setChildAttrs(cmd *exec.Cmd) {}
