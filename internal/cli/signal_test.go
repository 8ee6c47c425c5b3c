package cli

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"
)

func TestSignalIsTheCause(t *testing.T) {
	ctx, stop := signalContext(context.Background())
	defer stop()
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("SIGTERM did not end the context")
	}
	var s Signalled
	if cause := context.Cause(ctx); !errors.As(cause, &s) || cause.Error() != "received SIGTERM" {
		t.Fatalf("cause %v, want received SIGTERM", cause)
	}
}
