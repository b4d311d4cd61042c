//go:build linux

package xdp_drop

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// debugLog is recordLog with debug lines kept too.
type debugLog struct{ recordLog }

func (l *debugLog) Debugf(format string, args ...any) { l.add("D!", format, args...) }

// TestInterfaceNamesEscaped: an interface whose name holds an escape
// sequence and a byte that is not UTF-8, matched by a pattern, is attached
// and shown as the interface tag shows it (\x1b, \xff) in the log, in the
// errors and in the error field of another interface's xdp_drop_link point,
// which lists the interfaces there are; no raw byte of it reaches any.
func TestInterfaceNamesEscaped(t *testing.T) {
	ns := testns.New(t)
	const name, peer = "xe\x1b[1m\xff", "xf\x1b[1m\xff"
	const shown = `xe\x1b[1m\xff`
	_, _, err := ns.AddVeth(name, peer)
	require.NoError(t, err)
	inNS(t, ns, withDefaults(&XDPDrop{Interfaces: []string{name}}), func() error { return nil })

	log := &debugLog{}
	p := withDefaults(&XDPDrop{Interfaces: []string{"xe*", "nosuch0"}, Drop: []any{"all"}, Log: log})
	acc := startPlugin(t, ns, p)
	inNS(t, ns, p, func() error { return p.Gather(acc) })

	var out []string
	out = append(out, log.all()...)
	for _, err := range acc.Errors {
		out = append(out, "error: "+err.Error())
	}
	for _, m := range acc.GetTelegrafMetrics() {
		for _, tag := range m.TagList() {
			out = append(out, m.Name()+" tag: "+tag.Value)
		}
		for _, f := range m.FieldList() {
			out = append(out, m.Name()+" field: "+fmt.Sprint(f.Value))
		}
	}
	text := strings.Join(out, "\n")
	require.True(t, utf8.ValidString(text), "no byte that is not UTF-8:\n%q", text)
	require.NotContains(t, text, "\x1b", "no raw escape")
	require.Contains(t, text, "D! interfaces matched: "+shown)
	require.Contains(t, text, `I! interface "`+shown+`": attached in native mode`)
	require.Contains(t, text, "xdp_drop_link tag: "+shown)
	here := "(interfaces here: lo, " + testns.Dev + ", " + testns.Peer + ", " + shown + `, xf\x1b[1m\xff)`
	require.Contains(t, text, `error: interface "nosuch0" not found `+here)
	require.Contains(t, text, `xdp_drop_link field: interface "nosuch0" not found `+here)
	require.Equal(t, map[string]bool{shown: true, "nosuch0": false}, linkStates(acc))
}
