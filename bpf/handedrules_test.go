//go:build linux

package bpf

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// handedPolicy has enough host prefixes that the exact-prefix table is
// looked up under its key.
func handedPolicy(extra string) Policy {
	var hosts []netip.Prefix
	for i := 1; i <= 200; i++ {
		hosts = append(hosts, netip.MustParsePrefix(fmt.Sprintf("10.1.%d.%d/32", i/100, i%100)))
	}
	if extra != "" {
		hosts = append(hosts, netip.MustParsePrefix(extra))
	}
	return Policy{Rules: []Rule{{Name: "hosts", Drop: true, SrcPrefixes: hosts}}}
}

// handOff returns copies of in's handed rule maps, as a successor gets them.
func handOff(t *testing.T, in *Instance) *HandedRules {
	t.Helper()
	return handOffAll(t, in, ruleMapCount)
}

// TestAdoptRules: an instance adopts the rule maps handed over for the
// same rules, and its programs run on them and decide by them; other
// rules, or what is not the handed set, are not adopted and leave the
// instance to load its own.
func TestAdoptRules(t *testing.T) {
	testns.RequirePrivileged(t)
	old := NewInstance(handedPolicy(""))
	defer old.Close()
	fds, _ := old.RuleMapsToHand()
	require.Empty(t, fds, "nothing to hand before the maps are loaded")
	p, err := old.loadFresh()
	require.NoError(t, err)
	defer p.Close()
	handed := programMaps(t, p)
	defer closeMaps(handed)

	host := frames.Ether(frames.EtherIPv4, frames.Addressed(frames.IPv4(frames.ProtoUDP, 0, frames.UDP(8)),
		netip.MustParseAddr("10.1.1.42"), netip.MustParseAddr("198.51.100.1")))
	t.Run("same rules", func(t *testing.T) {
		in := NewInstance(handedPolicy(""))
		defer in.Close()
		adopted, why := in.AdoptRules(handOff(t, old))
		require.True(t, adopted, why)
		q, err := in.loadFresh()
		require.NoError(t, err)
		defer q.Close()
		if haveMultiBuffer() == nil {
			require.NoError(t, q.UseMultiBuffer())
		}
		got := programMaps(t, q)
		defer closeMaps(got)
		for _, name := range ruleMapNames {
			require.Equal(t, mapID(t, handed[name]), mapID(t, got[name]), "%s is the handed one", name)
		}
		verdict, err := q.XDP().Run(&ebpf.RunOptions{Data: host})
		require.NoError(t, err)
		require.Equal(t, uint32(1), verdict, "a host of the list dropped: found under the handed key")
	})
	for _, c := range []struct {
		name   string
		policy Policy
		handed func() *HandedRules
		why    string
	}{
		{"other rules", handedPolicy("203.0.113.0/24"), func() *HandedRules { return handOff(t, old) }, "the rules or the program version changed: this instance loads its own"},
		{"no rules", Policy{DropAll: true}, func() *HandedRules { return handOff(t, old) }, "this instance has no rules"},
		{"too few descriptors", handedPolicy(""), func() *HandedRules {
			h := handOff(t, old)
			unix.Close(h.fds[4])
			h.fds = h.fds[:4]
			return h
		}, "4 descriptors, not the 5 rule maps"},
		{"malformed key", handedPolicy(""), func() *HandedRules {
			h := handOff(t, old)
			fp, _, _ := strings.Cut(h.describe, ":")
			h.describe = fp + ":zz"
			return h
		}, "the handed-over layout key is malformed"},
		{"maps out of order", handedPolicy(""), func() *HandedRules {
			h := handOff(t, old)
			h.fds[0], h.fds[1] = h.fds[1], h.fds[0]
			return h
		}, "does not fit the rules"},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := NewInstance(c.policy)
			defer in.Close()
			adopted, why := in.AdoptRules(c.handed())
			require.False(t, adopted)
			require.Contains(t, why, c.why)
			if len(c.policy.Rules) == 0 {
				return
			}
			q, err := in.loadFresh()
			require.NoError(t, err)
			defer q.Close()
			got := programMaps(t, q)
			defer closeMaps(got)
			require.NotEqual(t, mapID(t, handed["prefix_buckets"]), mapID(t, got["prefix_buckets"]), "a set of its own")
		})
	}
}
