//go:build linux

package main

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// TestDemoNamespacePrefix: the demo names its namespace with
// XDP_DROP_TEST_NETNS_PREFIX when set, as the tests do, and with
// xdpdrop-demo- otherwise; the namespace is there under that name.
func TestDemoNamespacePrefix(t *testing.T) {
	testns.RequirePrivileged(t)
	for _, c := range []struct{ env, want string }{
		{testns.Prefix() + "demo-", testns.Prefix() + "demo-"},
		{"", demoPrefix},
	} {
		t.Setenv(testns.PrefixEnv, c.env)
		ns, err := createNamespace()
		require.NoError(t, err)
		name := ns.Name
		_, statErr := os.Stat("/var/run/netns/" + name)
		require.NoError(t, ns.Delete())
		require.True(t, strings.HasPrefix(name, c.want), "namespace %q with %s=%q", name, testns.PrefixEnv, c.env)
		require.NoError(t, statErr, "namespace %s", name)
	}
}
