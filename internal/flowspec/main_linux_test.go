//go:build linux

package flowspec

import (
	"os"
	"testing"
)

// TestMain lets the test binary be the speaker process StartSpeaker runs.
func TestMain(m *testing.M) {
	RunSpeakerIfRequested()
	os.Exit(m.Run())
}
