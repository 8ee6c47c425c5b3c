package kafka

import (
	"context"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"
)

// slogLogger adapts a *slog.Logger to kgo.Logger. The client's info lines
// (connections opened, metadata refreshed, partitions assigned) describe its
// own housekeeping, not the relay's work: they are logged at debug, so that
// at the default level an operator reads the relay's lines and the client's
// warnings and errors.
type slogLogger struct{ l *slog.Logger }

func (s slogLogger) Level() kgo.LogLevel {
	ctx := context.Background()
	switch {
	case s.l.Enabled(ctx, slog.LevelDebug):
		return kgo.LogLevelDebug
	case s.l.Enabled(ctx, slog.LevelWarn):
		return kgo.LogLevelWarn
	case s.l.Enabled(ctx, slog.LevelError):
		return kgo.LogLevelError
	}
	return kgo.LogLevelNone
}

func (s slogLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	var l slog.Level
	switch level {
	case kgo.LogLevelError:
		l = slog.LevelError
	case kgo.LogLevelWarn:
		l = slog.LevelWarn
	case kgo.LogLevelInfo, kgo.LogLevelDebug:
		l = slog.LevelDebug
	default:
		return
	}
	s.l.Log(context.Background(), l, msg, append(keyvals, "component", "kafka-client")...)
}
