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

	"github.com/xdp-drop/xdp_drop/internal/quote"
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
		// A name or path in the line may hold escape sequences: none reaches the terminal.
		fmt.Fprintf(w.out, "%s %s\n", level.Indicator(), quote.Line(line))
	}
}

// levelWriter is also the plugin's telegraf.Logger in the watch view.
var _ telegraf.Logger = (*levelWriter)(nil)

func (w *levelWriter) Errorf(format string, args ...any) {
	w.print(telegraf.Error, fmt.Sprintf(format, args...))
}
func (w *levelWriter) Error(args ...any) { w.print(telegraf.Error, args...) }
func (w *levelWriter) Warnf(format string, args ...any) {
	w.print(telegraf.Warn, fmt.Sprintf(format, args...))
}
func (w *levelWriter) Warn(args ...any) { w.print(telegraf.Warn, args...) }
func (w *levelWriter) Infof(format string, args ...any) {
	w.print(telegraf.Info, fmt.Sprintf(format, args...))
}
func (w *levelWriter) Info(args ...any) { w.print(telegraf.Info, args...) }
func (w *levelWriter) Debugf(format string, args ...any) {
	w.print(telegraf.Debug, fmt.Sprintf(format, args...))
}
func (w *levelWriter) Debug(args ...any) { w.print(telegraf.Debug, args...) }
func (w *levelWriter) Tracef(format string, args ...any) {
	w.print(telegraf.Trace, fmt.Sprintf(format, args...))
}
func (w *levelWriter) Trace(args ...any)                { w.print(telegraf.Trace, args...) }
func (w *levelWriter) Level() telegraf.LogLevel         { return w.level }
func (w *levelWriter) AddAttribute(string, interface{}) {}

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
