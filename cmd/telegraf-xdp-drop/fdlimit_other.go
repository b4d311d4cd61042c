//go:build !unix

package main

// raiseFDLimit has nothing to raise where there is no RLIMIT_NOFILE.
func raiseFDLimit() error { return nil }
