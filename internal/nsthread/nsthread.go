//go:build linux

// Package nsthread runs a function inside another network namespace. A
// namespace belongs to an OS thread, not to a goroutine: the function runs
// on a locked thread that enters the namespace and is put back afterwards.
package nsthread

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
)

// ErrThreadLost is returned, joined to f's error, when the thread could not
// be put back into its namespace. That thread is never reused: it stays
// locked and ends with its goroutine.
var ErrThreadLost = errors.New("could not return the thread to its network namespace")

// Do runs f on an OS thread that enter has moved into a namespace (with
// netns.Set or netns.NewNamed), then returns the thread to the namespace it
// was in. When enter fails, f does not run and enter's error is returned.
func Do(enter, f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		err := onThread(enter, f)
		if !errors.Is(err, ErrThreadLost) {
			runtime.UnlockOSThread()
		}
		done <- err
	}()
	return <-done
}

func onThread(enter, f func() error) error {
	orig, err := netns.Get()
	if err != nil {
		return fmt.Errorf("read the thread's network namespace: %w", err)
	}
	defer orig.Close()
	if err := enter(); err != nil {
		return restore(orig, err)
	}
	return restore(orig, f())
}

// restore puts the thread back into orig, whatever ferr says.
func restore(orig netns.NsHandle, ferr error) error {
	if err := netns.Set(orig); err != nil {
		return errors.Join(ferr, fmt.Errorf("%w: %w", ErrThreadLost, err))
	}
	return ferr
}
