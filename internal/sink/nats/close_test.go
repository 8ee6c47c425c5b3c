package nats

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/sink/sinktest"
)

// TestCloseIsQuiet: closing the sink (a normal shutdown, the end of
// `check`) is not a lost connection and logs no warning.
func TestCloseIsQuiet(t *testing.T) {
	requireServer(t)
	var logs sinktest.LogBuffer
	p := newPublisher(t, testConfig(serverAddr()), WithLogger(logs.Logger(slog.LevelWarn)))
	waitConnected(t, p)
	if err := p.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if out := logs.String(); strings.Contains(out, "connection lost") {
		t.Errorf("Close logged:\n%s", out)
	}
}
