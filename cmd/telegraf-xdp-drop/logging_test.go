package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/influxdata/telegraf"
	"github.com/stretchr/testify/require"
)

// TestLogLinesEscaped: whatever a log line carries (an error naming a pin
// path under an interface whose name holds an escape sequence and byte
// 0xFF, a carriage return), the binary writes it with those bytes as \xNN,
// as the interface tag shows them; text quoted with %q is unchanged, and
// each line keeps its level prefix.
func TestLogLinesEscaped(t *testing.T) {
	var out strings.Builder
	w := &levelWriter{out: &out, level: telegraf.Info}
	w.Warnf("interface %q: pin link at %s: %v", "xe\x1b[1m\xff", "/sys/fs/bpf/xdp_drop/xe\x1b[1m\xff/link", fmt.Errorf("file exists"))
	w.Error("first\r\x1b[2Kline\nsecond \x9b line\tend")
	require.Equal(t, `W! interface "xe\x1b[1m\xff": pin link at /sys/fs/bpf/xdp_drop/xe\x1b[1m\xff/link: file exists`+"\n"+
		`E! first\x0d\x1b[2Kline`+"\n"+
		`E! second \x9b line`+"\tend\n", out.String())
}
