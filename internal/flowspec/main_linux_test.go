//go:build linux

package flowspec

import (
	"os"
	"testing"
)

// TestMain lets the test binary be the speaker process StartSpeaker runs,
// or a plugin that starts one (TestSpeakerStops).
func TestMain(m *testing.M) {
	RunSpeakerIfRequested()
	if os.Getenv(speakerParentEnv) != "" {
		runSpeakerParent()
	}
	os.Exit(m.Run())
}
