package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/influxdata/telegraf"
	"github.com/influxdata/telegraf/logger"
)

// levelWriter prints log messages the way inputs.execd reads a child's
// stderr: each line starts with Telegraf's level prefix ("E! ", "W! ", "I! ",
// "D! ") and carries no timestamp, which execd would file as an error.
type levelWriter struct {
	mu    sync.Mutex
	out   io.Writer
	level telegraf.LogLevel
}

func (w *levelWriter) print(level telegraf.LogLevel, args ...any) {
	if !w.level.Includes(level) {
		return
	}
	msg := strings.TrimRight(fmt.Sprint(args...), "\n")
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, line := range strings.Split(msg, "\n") {
		fmt.Fprintf(w.out, "%s %s\n", level.Indicator(), line)
	}
}

func (w *levelWriter) Errorf(format string, args ...any) {
	w.print(telegraf.Error, fmt.Sprintf(format, args...))
}

// setupLogging routes Telegraf's logger, which the shim and the plugin use,
// through a levelWriter on out. The logger's own sink, which stamps a time on
// every line, is pointed at /dev/null.
func setupLogging(out io.Writer, debug bool) (*levelWriter, error) {
	w := &levelWriter{out: out, level: telegraf.Info}
	if debug {
		w.level = telegraf.Debug
	}
	if err := logger.SetupLogging(&logger.Config{Logfile: os.DevNull, Debug: debug}); err != nil {
		return nil, err
	}
	_, err := logger.AddCallback(func(level telegraf.LogLevel, _ time.Time, _ string, _ map[string]any, args ...any) {
		w.print(level, args...)
	})
	return w, err
}
