//go:build !linux

// Package handover passes a stopping instance's XDP attachments to its
// successor; XDP, and so handover, exists only on Linux.
package handover

// RunHolderIfRequested does nothing: there is no handover off Linux.
func RunHolderIfRequested() {}
