//go:build linux

package xdp_drop

import (
	"os"
	"testing"

	"github.com/xdp-drop/xdp_drop/internal/flowspec"
	"github.com/xdp-drop/xdp_drop/internal/handover"
)

// TestMain lets the test binary be what the plugin re-executes, as the
// command's main does: a handover holder, or the FlowSpec BGP speaker.
func TestMain(m *testing.M) {
	handover.RunHolderIfRequested()
	flowspec.RunSpeakerIfRequested()
	os.Exit(m.Run())
}
