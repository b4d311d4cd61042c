//go:build linux

package bpf

import (
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// TestLoadErrorCarriesVerifierLog breaks the program the way a bad edit of
// xdp_drop.c would (an out-of-bounds context read) and checks the load error
// carries the verifier's log, not just "permission denied".
func TestLoadErrorCarriesVerifierLog(t *testing.T) {
	testns.RequirePrivileged(t)
	in := NewInstance(Policy{DropAll: true})
	spec, err := in.spec()
	require.NoError(t, err)
	spec.Programs[xdpDropProgXdpDrop].Instructions = asm.Instructions{
		asm.LoadMem(asm.R0, asm.R1, 4000, asm.Word),
		asm.Return(),
	}
	_, err = in.load(spec, nil)
	require.Error(t, err)
	require.Contains(t, err.Error(), "load XDP program")
	require.Contains(t, err.Error(), "invalid bpf_context access", "the verifier's reason")
	require.Contains(t, err.Error(), "processed", "the verifier's log, not only its last line")
	var ve *ebpf.VerifierError
	require.ErrorAs(t, err, &ve, "still a verifier error: the error field says the log is in Telegraf's log")
}
