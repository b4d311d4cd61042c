package xdp_drop

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestInitReportsEveryError: Init refuses a config with a refusal for each
// bad value, not only the first, each naming its option (and rule) for the
// binary to find its line; a prefix file reports up to maxLineErrors bad
// lines, and how many more there are.
func TestInitReportsEveryError(t *testing.T) {
	list := filepath.Join(t.TempDir(), "list.txt")
	var lines []string
	for i := range maxLineErrors + 5 {
		lines = append(lines, fmt.Sprintf("192.0.2.%d/24", i+1))
	}
	writeList(t, list, append([]string{"192.0.2.0/24"}, lines...)...)
	x := withDefaults(&XDPDrop{
		Interfaces: []string{"eth1"},
		Mode:       "turbo",
		Drop:       []any{"udp", "quic"},
		Rules: []Rule{
			{Name: "dns", Action: "pass", Protocol: []any{"udp"}, SrcPrefix: []string{"10.0.0.1/8"}, DstPort: []any{int64(70000)}},
			{Name: "Bad Name", Action: "reject", Protocol: []any{"tcp"}},
			{Name: "list", Action: "drop", SrcPrefixFile: []string{list}},
		},
		HandoverTimeout: -1,
	})
	err := x.Init()
	require.Error(t, err)
	type refusal struct {
		rule int
		key  string
	}
	var got []refusal
	var texts []string
	for _, e := range Errors(err) {
		var opt *OptionError
		require.True(t, errors.As(e, &opt), "%v names no option", e)
		got = append(got, refusal{opt.Rule, opt.Key})
		texts = append(texts, e.Error())
	}
	want := []refusal{{0, "mode"}, {0, "drop"}, {1, "src_prefix"}, {1, "dst_port"}, {2, "name"}, {2, "action"}}
	for range maxLineErrors + 1 {
		want = append(want, refusal{3, "src_prefix_file"})
	}
	want = append(want, refusal{0, "handover_timeout"})
	require.Equal(t, want, got, "%q", texts)
	require.Equal(t, `mode = "turbo" is not a mode; use "native" (default), "generic", "offload" or "auto"`, texts[0])
	require.Contains(t, texts[1], `drop: "quic" is not an IP protocol name`)
	require.Equal(t, `rule "dns": src_prefix: "10.0.0.1/8" has host bits set; did you mean "10.0.0.0/8"?`, texts[2])
	require.Equal(t, `rule "dns": dst_port: 70000 is out of range; ports are 0-65535`, texts[3])
	require.Contains(t, texts[4], `rule 2: name "Bad Name" holds 'B'`)
	require.Equal(t, `rule 2: action = "reject" is not an action; use "drop", "pass" or "limit"`, texts[5])
	require.Equal(t, `rule "list": src_prefix_file: `+list+`:2: "192.0.2.1/24" has host bits set; did you mean "192.0.2.0/24"?`, texts[6])
	require.Equal(t, `rule "list": src_prefix_file: `+list+`: 5 more lines are no prefix`, texts[6+maxLineErrors])
}
