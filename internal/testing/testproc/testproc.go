//go:build linux

// Package testproc starts the processes of tests so that they die with the
// test process, whatever ends it: a run cut short runs no t.Cleanup, and a
// helper left running (a mount namespace held by sleep, a LAPI, the binary)
// keeps its namespaces and mounts on the host.
package testproc

import (
	"os/exec"
	"syscall"
)

// Command is exec.Command for a process that dies with the test process.
func Command(name string, arg ...string) *exec.Cmd {
	return Tie(exec.Command(name, arg...))
}

// Tie makes c, not yet started, die with the test process: the kernel sends
// it SIGKILL when the thread that starts it exits (PR_SET_PDEATHSIG).
//
// Go ends an OS thread only when a goroutine exits while locked to it
// (nsthread.Do's lost threads, a thread unshared into another namespace), so
// start c from a goroutine that is not locked, never inside ns.Do. The
// kernel keeps the signal across execve but clears it when a program changes
// its user or group (setpriv, runuser) or execs a set-user-ID or
// file-capability binary, and c's children do not inherit it: a program that
// forks what it runs must pass it on (unshare --kill-child), and past those
// a pipe to stdin is what tells the binary (it stops when stdin ends).
func Tie(c *exec.Cmd) *exec.Cmd {
	if c.SysProcAttr == nil {
		c.SysProcAttr = &syscall.SysProcAttr{}
	}
	c.SysProcAttr.Pdeathsig = syscall.SIGKILL
	return c
}
