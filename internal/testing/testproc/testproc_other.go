//go:build !linux

package testproc

import "os/exec"

// Command is exec.Command: only Linux has a parent-death signal.
func Command(name string, arg ...string) *exec.Cmd { return exec.Command(name, arg...) }

// Tie returns c unchanged: only Linux has a parent-death signal.
func Tie(c *exec.Cmd) *exec.Cmd { return c }
