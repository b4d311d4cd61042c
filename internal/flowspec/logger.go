package flowspec

import (
	"fmt"
	"sort"
	"strings"

	"github.com/osrg/gobgp/v3/pkg/log"
)

// logger passes GoBGP's log to the receiver's (GoBGP's Fatal and Panic
// are logged as errors: the receiver never exits the process).
type logger struct {
	log   func(level byte, msg string)
	level log.LogLevel
}

func (l *logger) out(level byte, lv log.LogLevel, msg string, fields log.Fields) {
	if lv > l.effective() {
		return
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("bgp: ")
	b.WriteString(msg)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%v", k, fields[k])
	}
	l.log(level, b.String())
}

func (l *logger) effective() log.LogLevel { return l.level }

func (l *logger) Panic(msg string, fields log.Fields) { l.out('E', log.PanicLevel, msg, fields) }
func (l *logger) Fatal(msg string, fields log.Fields) { l.out('E', log.FatalLevel, msg, fields) }
func (l *logger) Error(msg string, fields log.Fields) { l.out('E', log.ErrorLevel, msg, fields) }
func (l *logger) Warn(msg string, fields log.Fields)  { l.out('W', log.WarnLevel, msg, fields) }
func (l *logger) Info(msg string, fields log.Fields)  { l.out('I', log.InfoLevel, msg, fields) }
func (l *logger) Debug(msg string, fields log.Fields) { l.out('D', log.DebugLevel, msg, fields) }
func (l *logger) SetLevel(level log.LogLevel)         { l.level = level }
func (l *logger) GetLevel() log.LogLevel              { return l.effective() }
