package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/influxdata/telegraf"
	"github.com/influxdata/telegraf/plugins/common/shim"

	"github.com/xdp-drop/xdp_drop/internal/signame"
	"github.com/xdp-drop/xdp_drop/plugins/inputs/xdp_drop"
)

// maxPromptLine is the longest stdin line taken as a gather prompt:
// inputs.execd sends empty lines, and the shim's own line scanner gives up
// (and so ends the process) at 64 KiB.
const maxPromptLine = 64 << 10

// serve runs the plugin under the shim until stdin ends, SIGTERM or SIGINT
// arrives, or stdout fails, and logs why it stopped. Stdin is read here, not
// by the shim: the shim gets one empty line per line read, so that no input
// can make its scanner end the process without a word.
func serve(plugin *xdp_drop.XDPDrop, conf *loadedConfig, pollInterval time.Duration, log *levelWriter) int {
	// A closed stdout is then a write error the shim reports, not a silent
	// death by SIGPIPE.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)

	prompts, promptWriter, err := os.Pipe()
	if err != nil {
		log.Errorf("stopped: create the gather prompt pipe: %v", err)
		return 1
	}
	stdin := os.Stdin
	os.Stdin = prompts // shim.New reads its input from os.Stdin
	s := shim.New()
	os.Stdin = stdin
	if err := s.AddInput(plugin); err != nil {
		conf.report(log, unwrapInit(err))
		return 1
	}

	var stdinEnd stopCause
	go func() {
		stdinEnd.set(feedPrompts(stdin, promptWriter, log))
		promptWriter.Close() // the shim's scanner ends: it stops the plugin
	}()
	if err := s.Run(pollInterval); err != nil {
		log.Errorf("stopped: %v", err)
		return 1
	}
	return logStop(stdinEnd.get(), signals, log)
}

// logStop logs why the shim returned and gives the exit code: stdin's end
// or a signal is an orderly stop; otherwise writing metrics failed, which
// the shim has logged.
func logStop(stdinEnd error, signals <-chan os.Signal, log *levelWriter) int {
	switch {
	case errors.Is(stdinEnd, io.EOF):
		log.Infof("stopped: stdin closed (inputs.execd closes it to stop the plugin)")
		return 0
	case stdinEnd != nil:
		log.Errorf("stopped: read stdin: %v", stdinEnd)
		return 1
	}
	select {
	case sig := <-signals:
		log.Infof("stopped: received %s", signame.Name(sig))
		return 0
	default:
	}
	log.Errorf("stopped: writing metrics to stdout failed (see the warning above); is the reading end closed?")
	return 1
}

// feedPrompts writes one newline to out for every line read from in, and
// discards lines longer than maxPromptLine with a warning. It returns io.EOF
// when in ends, or the error that ended reading.
func feedPrompts(in io.Reader, out io.Writer, log telegraf.Logger) error {
	r := bufio.NewReaderSize(in, 4096)
	length := 0
	for {
		chunk, err := r.ReadSlice('\n')
		length += len(chunk)
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && length == 0:
			return io.EOF
		case err != nil && !errors.Is(err, io.EOF):
			return err
		}
		if length > maxPromptLine {
			log.Warnf("stdin: discarded a line of %d bytes (over %d); inputs.execd sends empty lines to ask for a gather", length, maxPromptLine)
		} else if _, werr := out.Write([]byte{'\n'}); werr != nil {
			return fmt.Errorf("pass gather prompt to the shim: %w", werr)
		}
		if err != nil { // a last line without a newline
			return io.EOF
		}
		length = 0
	}
}

// stopCause holds the first reason recorded for stopping.
type stopCause struct {
	mu  sync.Mutex
	err error
}

func (c *stopCause) set(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = err
	}
}

func (c *stopCause) get() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}
