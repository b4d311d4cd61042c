//go:build !linux

package flowspec

// RunSpeakerIfRequested does nothing: the speaker process runs on Linux only.
func RunSpeakerIfRequested() {}
