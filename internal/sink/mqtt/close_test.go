package mqtt

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/sink/sinktest"
)

// TestCloseIsQuiet: closing the sink (a normal shutdown, the end of
// `check`) is not a lost connection and logs no warning.
func TestCloseIsQuiet(t *testing.T) {
	var logs sinktest.LogBuffer
	p, err := New(testConfig(testAddr()), WithLogger(logs.Logger(slog.LevelWarn)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	if err := p.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if out := logs.String(); strings.Contains(out, "connection lost") {
		t.Errorf("Close logged:\n%s", out)
	}
}
