//go:build linux

package txgen

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// AllowedCPUs lists, in order, the CPUs the calling thread may run on: the
// ones OnCPU can bind to. A restricted affinity mask (taskset, a cgroup
// cpuset) need not start at CPU 0 nor be contiguous.
func AllowedCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("read CPU affinity: %w", err)
	}
	var cpus []int
	for c := 0; len(cpus) < set.Count(); c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// OnCPU runs f with the calling thread bound to cpu, then restores the
// thread's affinity. A veth receives what is sent from CPU c on its RX queue
// c (modulo its queues), with either transport, so this spreads traffic over
// CPUs and queues. The caller must hold its OS thread (runtime.LockOSThread).
func OnCPU(cpu int, f func() error) error {
	var all, one unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		return err
	}
	defer unix.SchedSetaffinity(0, &all)
	one.Set(cpu)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		return fmt.Errorf("bind to CPU %d: %w", cpu, err)
	}
	return f()
}
