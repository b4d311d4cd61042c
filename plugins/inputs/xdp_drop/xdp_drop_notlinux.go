//go:build !linux

package xdp_drop

import (
	"errors"

	"github.com/influxdata/telegraf"
)

type iface struct{ name string }

var errNotLinux = errors.New("xdp_drop needs Linux: XDP is a Linux kernel feature")

func (*XDPDrop) Start(telegraf.Accumulator) error  { return errNotLinux }
func (*XDPDrop) Gather(telegraf.Accumulator) error { return errNotLinux }
func (*XDPDrop) Stop()                             {}

func (*XDPDrop) Reconcile(telegraf.Accumulator)         {}
func (*XDPDrop) Snapshot(telegraf.Accumulator) Snapshot { return Snapshot{} }

type handoff struct{}

func handoffOf(string) *handoff { return &handoff{} }

func (namespace) checkEntry() error { return nil }

type kernelSide struct{}

func (*links) planInterfaces() ([]PlannedInterface, []string, error) { return nil, nil, errNotLinux }

func (*links) planPins() error { return nil }

type flowSpec struct{ opts *flowSpecSettings }
