//go:build linux

package main

import (
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// env is the benchmark's own network namespace and what it attached there.
// Every attach goes through the namespace's CheckAttachable guard: only
// veths this run created, from a thread inside this namespace.
type env struct {
	ns      *testns.NS
	idle    int
	closers []io.Closer
}

func newEnv() (*env, error) {
	ns, err := testns.Create("xdpdrop-bench-")
	if err != nil {
		return nil, fmt.Errorf("create benchmark namespace: %w", err)
	}
	return &env{ns: ns}, nil
}

// Close detaches everything and deletes the namespace (and only it).
func (e *env) Close() error {
	var errs []error
	for i := len(e.closers) - 1; i >= 0; i-- {
		errs = append(errs, e.closers[i].Close())
	}
	errs = append(errs, e.ns.Delete())
	return errors.Join(errs...)
}

// attach attaches prog to ifname in the namespace, checked by the guard.
func (e *env) attach(prog *ebpf.Program, ifname string, flags link.XDPAttachFlags) (link.Link, error) {
	var l link.Link
	err := e.ns.Do(func() error {
		if err := e.ns.CheckAttachable(ifname); err != nil {
			return err
		}
		idx, err := e.ns.Netlink().LinkByName(ifname)
		if err != nil {
			return err
		}
		l, err = link.AttachXDP(link.XDPOptions{Program: prog, Interface: idx.Attrs().Index, Flags: flags})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("attach XDP to %s: %w", ifname, err)
	}
	return l, nil
}

// keepInDispatcher attaches prog natively to a veth of its own that carries
// no traffic, for the rest of the run. BPF_PROG_TEST_RUN with repeat > 1
// puts a program into the kernel's XDP dispatcher and takes it out again,
// each time waiting for an RCU grace period (10-30 ms); for a program that is
// attached, and so already in the dispatcher, it does neither. Programs run
// through the dispatcher either way. Closing the result detaches it; so does
// Close.
func (e *env) keepInDispatcher(prog *ebpf.Program) (io.Closer, error) {
	name := fmt.Sprintf("xdpbi%d", e.idle)
	e.idle++
	if _, _, err := e.ns.AddVeth(name, name+"p"); err != nil {
		return nil, err
	}
	l, err := e.attach(prog, name, link.XDPDriverMode)
	if err != nil {
		return nil, err
	}
	c := &onceCloser{c: l}
	e.closers = append(e.closers, c)
	return c, nil
}

// onceCloser closes c the first time only.
type onceCloser struct {
	once sync.Once
	c    io.Closer
	err  error
}

func (o *onceCloser) Close() error {
	o.once.Do(func() { o.err = o.c.Close() })
	return o.err
}
