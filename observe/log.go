package observe

import (
	"io"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/rs/zerolog/diode"
)

var logDropped = Factory.NewCounter(prometheus.CounterOpts{
	Name: "gateway_log_lines_dropped_total", Help: "Log lines dropped because the writer fell behind.",
})

// NewLogger returns the process logger. JSON lines go through a bounded,
// non-blocking ring (zerolog's diode): a slow log sink drops lines (counted
// in gateway_log_lines_dropped_total) instead of slowing requests or growing
// memory. Console mode writes synchronously for people reading a terminal.
// The returned close flushes the ring.
func NewLogger(level, format string, w io.Writer) (zerolog.Logger, func()) {
	if w == nil {
		w = os.Stderr
	}
	lvl, err := zerolog.ParseLevel(level)
	if err != nil {
		lvl = zerolog.InfoLevel
	}
	if format == "console" {
		return zerolog.New(zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}).Level(lvl).With().Timestamp().Logger(), func() {}
	}
	d := diode.NewWriter(w, 4096, 10*time.Millisecond, func(missed int) { logDropped.Add(float64(missed)) })
	return zerolog.New(d).Level(lvl).With().Timestamp().Logger(), func() { _ = d.Close() }
}
