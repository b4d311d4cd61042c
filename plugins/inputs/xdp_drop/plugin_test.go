package xdp_drop

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
)

// withDefaults gives the options p leaves at zero New's defaults, so that a
// test states only what it sets and still starts from what a config would.
// handover_timeout stays as p has it (0 unless set: released on stop, no
// holder between the instances a test starts and stops).
func withDefaults(p *XDPDrop) *XDPDrop {
	timeout := p.HandoverTimeout
	into, from := reflect.ValueOf(p).Elem(), reflect.ValueOf(New()).Elem()
	for i := range into.NumField() {
		if !into.Type().Field(i).IsExported() {
			continue
		}
		if dst := into.Field(i); dst.IsZero() {
			dst.Set(from.Field(i))
		}
	}
	p.HandoverTimeout = timeout
	return p
}

// TestWithDefaults: a plugin from withDefaults validates as New's does, and
// keeps the options the test set.
func TestWithDefaults(t *testing.T) {
	p := withDefaults(&XDPDrop{Interfaces: []string{"eth1"}, Drop: []any{"udp"}, SampleRate: 1000, TopSources: 3})
	require.NoError(t, p.Init())
	require.Equal(t, int64(3), p.TopSources)
	require.Equal(t, int64(DefaultSampleMaxPerSecond), p.SampleMaxPerSecond)
	require.Zero(t, p.HandoverTimeout)
}
