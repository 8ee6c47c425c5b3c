package kafka

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestClientInfoIsDebug(t *testing.T) {
	var buf bytes.Buffer
	l := slogLogger{slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	if got := l.Level(); got != kgo.LogLevelWarn {
		t.Errorf("at info, the client logs from %v, want warn", got)
	}
	l.Log(kgo.LogLevelInfo, "metadata refreshed")
	l.Log(kgo.LogLevelWarn, "broker unreachable", "broker", "b1")
	out := buf.String()
	if strings.Contains(out, "metadata refreshed") || !strings.Contains(out, "level=WARN msg=\"broker unreachable\" broker=b1 component=kafka-client") {
		t.Errorf("logged:\n%s", out)
	}
	buf.Reset()
	l = slogLogger{slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	l.Log(kgo.LogLevelInfo, "metadata refreshed")
	if !strings.Contains(buf.String(), "level=DEBUG msg=\"metadata refreshed\"") {
		t.Errorf("at debug, logged:\n%s", buf.String())
	}
}
