package embedded

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/nats-io/nats-server/v2/server"
)

var _ server.Logger = (*natsLogger)(nil)

// natsLogger adapts nats-server's printf-style logging to slog. It also keeps
// the last error and the first fatal message so that StartNATS can say why a
// server never became ready. Fatalf never exits the process.
type natsLogger struct {
	log *slog.Logger // nil: record failures only

	mu       sync.Mutex
	lastErr  string
	firstBad string
}

func (l *natsLogger) Noticef(format string, v ...any) { l.emit(slog.LevelInfo, format, v) }
func (l *natsLogger) Warnf(format string, v ...any)   { l.emit(slog.LevelWarn, format, v) }
func (l *natsLogger) Debugf(format string, v ...any)  { l.emit(slog.LevelDebug, format, v) }
func (l *natsLogger) Tracef(format string, v ...any)  { l.emit(slog.LevelDebug-4, format, v) }

func (l *natsLogger) Errorf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.mu.Lock()
	l.lastErr = msg
	l.mu.Unlock()
	l.write(slog.LevelError, msg)
}

func (l *natsLogger) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.mu.Lock()
	l.lastErr = msg
	if l.firstBad == "" {
		l.firstBad = msg
	}
	l.mu.Unlock()
	l.write(slog.LevelError, msg, slog.Bool("fatal", true))
}

func (l *natsLogger) emit(level slog.Level, format string, v []any) {
	if l.log == nil || !l.log.Enabled(context.Background(), level) {
		return
	}
	l.write(level, fmt.Sprintf(format, v...))
}

func (l *natsLogger) write(level slog.Level, msg string, attrs ...slog.Attr) {
	if l.log == nil {
		return
	}
	l.log.LogAttrs(context.Background(), level, msg, append(attrs, slog.String("component", "nats-server"))...)
}

// fatal returns the first fatal message, or "".
func (l *natsLogger) fatal() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.firstBad
}

// lastFailure returns the most recent error or fatal message, or "".
func (l *natsLogger) lastFailure() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.firstBad != "" {
		return l.firstBad
	}
	return l.lastErr
}
