//go:build linux

package bpf

import (
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"
)

// noBansDigests are, per program without FeatureBans, the digest of its
// instructions (with their map references and offsets, as text).
func noBansDigests(t *testing.T, spec *ebpf.CollectionSpec) string {
	var b strings.Builder
	for _, f := range slices.Sorted(maps.Keys(programVariants)) {
		if f&FeatureBans != 0 {
			continue
		}
		name := programVariants[f]
		prog := spec.Programs[name]
		require.NotNil(t, prog, name)
		h := sha256.New()
		for _, ins := range prog.Instructions {
			// Without the source lines, which move as the file grows.
			fmt.Fprintf(h, "%v %s\n", ins, ins.Reference())
		}
		sum := h.Sum(nil)
		fmt.Fprintf(&b, "%s %d %s\n", name, len(prog.Instructions), hex.EncodeToString(sum[:12]))
	}
	return b.String()
}

var updateNoBans = flag.Bool("update-nobans", false, "rewrite testdata/nobans_programs.txt from the embedded program")

// TestNoBansProgramsUnchanged: the programs without bans are, instruction
// for instruction, those of the build before bans existed (their digests in
// testdata/nobans_programs.txt): bans cost a policy without them nothing.
// A change to xdp_drop.c meant to change them rewrites the file with
// -update-nobans.
func TestNoBansProgramsUnchanged(t *testing.T) {
	spec, err := loadXdpDrop()
	require.NoError(t, err)
	got := noBansDigests(t, spec)
	const golden = "testdata/nobans_programs.txt"
	if *updateNoBans {
		require.NoError(t, os.WriteFile(golden, []byte(got), 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err)
	require.Equal(t, string(want), got, "the programs without bans changed instructions: run with -update-nobans if that is meant")
}

// TestBansProgramsDiffer: every feature set has a bans variant, and it is
// a program of its own, with ban code the one without lacks.
func TestBansProgramsDiffer(t *testing.T) {
	spec, err := loadXdpDrop()
	require.NoError(t, err)
	for f, name := range programVariants {
		if f&FeatureBans != 0 {
			continue
		}
		with, ok := programVariants[f|FeatureBans]
		require.True(t, ok, "no bans variant of %s", f)
		require.Greater(t, len(spec.Programs[with].Instructions), len(spec.Programs[name].Instructions), "%s vs %s", with, name)
	}
}
